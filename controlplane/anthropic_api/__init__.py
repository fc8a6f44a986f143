"""Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``) served by the same
sample operations, metering and audit as the OpenAI-compatible endpoints."""
