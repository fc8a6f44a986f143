"""A request's tokens, counted in this one place: what an operation puts through the model (a
worker sizes its threads by it) and what a completed one is billed for, per meter."""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.training_sessions.models import Operation

from .models import Meter

# where each kind that trains on, or runs forward, a batch keeps it in its request
_BATCH_KEYS = {
    Operation.Kind.FORWARD_BACKWARD: "forward_backward_input",
    Operation.Kind.FORWARD: "forward_input",
}


def input_tokens(model_input: dict) -> int:
    """Tokens of a wire ``ModelInput``: token chunks by length, images by their declared size."""
    total = 0
    for chunk in model_input.get("chunks") or ():
        if chunk.get("type", "encoded_text") == "encoded_text":
            total += len(chunk.get("tokens") or ())
        else:
            total += int(chunk.get("expected_tokens") or 0)
    return total


def datum_tokens(data: Iterable[dict]) -> int:
    return sum(input_tokens(d.get("model_input") or {}) for d in data)


def batch_tokens(kind: str, payload: dict) -> int | None:
    """Tokens of a forward or forward_backward request's batch; None for other kinds."""
    key = _BATCH_KEYS.get(kind)
    if key is None:
        return None
    return datum_tokens((payload.get(key) or {}).get("data") or ())


def prompt_tokens(payload: dict) -> int:
    """Tokens of a sample request's prompt."""
    return input_tokens(payload.get("prompt") or {})


def work_tokens(kind: str, payload: dict) -> int | None:
    """Tokens an operation puts through the model (sampling: the prompt and every new token it
    may generate); None for kinds whose work is not counted in tokens."""
    if kind == Operation.Kind.SAMPLE:
        params = payload.get("sampling_params") or {}
        new = int(payload.get("num_samples") or 1) * int(params.get("max_tokens") or 0)
        return prompt_tokens(payload) + new
    return batch_tokens(kind, payload)


def operation_usage(kind: str, payload: dict, result: dict) -> dict[str, int]:
    """Tokens per meter of one completed operation; kinds that process no tokens have none."""
    if kind == Operation.Kind.FORWARD_BACKWARD:
        return {Meter.TRAIN_TOKENS: batch_tokens(kind, payload) or 0}
    if kind == Operation.Kind.FORWARD:
        return {Meter.FORWARD_TOKENS: batch_tokens(kind, payload) or 0}
    if kind == Operation.Kind.SAMPLE:
        sequences = result.get("sequences") or ()
        return {
            Meter.PREFILL_TOKENS: prompt_tokens(payload),
            Meter.SAMPLED_TOKENS: sum(len(s.get("tokens") or ()) for s in sequences),
        }
    return {}
