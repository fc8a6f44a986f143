"""The JSON answers of Anthropic's face: the ``message`` object, its ``stop_reason`` and usage
(``input_tokens`` billed as prefill, ``output_tokens`` every token sampled and billed)."""

from __future__ import annotations

from controlplane.completions.rendering import Choice
from controlplane.completions.services import Completed


def stop_reason(choice: Choice) -> str:
    """``stop_sequence`` (the text ends before one), ``end_turn`` (the model ended its turn) or
    ``max_tokens`` (it ran out)."""
    if choice.stop is not None:
        return "stop_sequence"
    return "end_turn" if choice.finish_reason == "stop" else "max_tokens"


def usage(done: Completed) -> dict:
    return {
        "input_tokens": done.prompt_tokens,
        "output_tokens": done.completion_tokens,
        "cache_creation_input_tokens": 0,  # nothing is cached: cache_control changes nothing
        "cache_read_input_tokens": 0,
        "service_tier": "standard",
    }


def head(id: str, model: str) -> dict:
    """What a message says before its content."""
    return {"id": id, "type": "message", "role": "assistant", "model": model}


def message(done: Completed) -> dict:
    (choice,) = done.choices
    return {
        **head(done.id, done.model),
        "content": [{"type": "text", "text": choice.text}],
        "stop_reason": stop_reason(choice),
        "stop_sequence": choice.stop,
        "usage": usage(done),
    }
