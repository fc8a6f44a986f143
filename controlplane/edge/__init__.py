"""What the three HTTP faces (``/api/v1``, the OpenAI-compatible ``/v1`` and the dashboard) do
alike at their edge: who is calling, whether they may (authorized and audited), and the error
shape each face answers in. Imports nothing from ``controlplane.api``, ``openai_api`` or ``web``.
"""
