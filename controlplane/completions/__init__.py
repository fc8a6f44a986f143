"""Sampling from a model by name, for the faces that speak in chat messages and text (the
OpenAI-compatible ``/v1`` and Anthropic's Messages): names resolved to samplers, prompts rendered
with the model's chat template, sample operations submitted, waited for, heard token by token
and read back as text. No face's request or answer shapes live here."""
