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
    return sum(text_and_image_tokens(model_input))


def text_and_image_tokens(model_input: dict) -> tuple[int, int]:
    """A wire ``ModelInput``'s tokens of its token chunks, and of its images (as declared, or
    as the control plane wrote in on arrival)."""
    text = image = 0
    for chunk in model_input.get("chunks") or ():
        if chunk.get("type", "encoded_text") == "encoded_text":
            text += len(chunk.get("tokens") or ())
        else:
            image += int(chunk.get("expected_tokens") or 0)
    return text, image


def datum_tokens(data: Iterable[dict]) -> int:
    return sum(input_tokens(d.get("model_input") or {}) for d in data)


def datum_image_tokens(data: Iterable[dict]) -> int:
    return sum(text_and_image_tokens(d.get("model_input") or {})[1] for d in data)


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


def image_tokens(kind: str, payload: dict) -> int:
    """The image tokens of an operation's inputs (a batch's datums, a sample's prompt)."""
    if kind == Operation.Kind.SAMPLE:
        return text_and_image_tokens(payload.get("prompt") or {})[1]
    key = _BATCH_KEYS.get(kind)
    if key is None:
        return 0
    return datum_image_tokens((payload.get(key) or {}).get("data") or ())


def operation_usage(kind: str, payload: dict, result: dict) -> dict[str, int]:
    """Tokens per meter of one completed operation; kinds that process no tokens have none.
    Image tokens are their own meter (only when there are some), left out of the others."""
    images = image_tokens(kind, payload)
    usage: dict[str, int] = {}
    if kind == Operation.Kind.FORWARD_BACKWARD:
        usage = {Meter.TRAIN_TOKENS: (batch_tokens(kind, payload) or 0) - images}
    elif kind == Operation.Kind.FORWARD:
        usage = {Meter.FORWARD_TOKENS: (batch_tokens(kind, payload) or 0) - images}
    elif kind == Operation.Kind.SAMPLE:
        sequences = result.get("sequences") or ()
        usage = {
            Meter.PREFILL_TOKENS: prompt_tokens(payload) - images,
            Meter.SAMPLED_TOKENS: sum(len(s.get("tokens") or ()) for s in sequences),
        }
    if images:
        usage[Meter.IMAGE_TOKENS] = images
    return usage
