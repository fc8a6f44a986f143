"""OpenAI-compatible endpoints (``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``)
served by the same sample operations as the Tinker protocol."""
