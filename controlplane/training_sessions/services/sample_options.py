"""The sampling options tinker SDK 0.30–0.38 added to ``asample`` (top-k of sampled tokens,
logprobs of chosen prompt tokens, draws at prompt positions, scoring only the prompt's tail):
checked against the prompt and the service's limits before the request is taken (a 400 naming
the option), then passed to the worker in the operation's payload under their wire names. So
is a structured-output request's schema, regex or grammar: one that cannot be compiled is
refused here, with the reason.

The wire type ``SampleRequest`` checks their types; the worker checks them again against the
model (its vocabulary, its context).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from controlplane.errors import DomainError
from loopwright.structured_output import Structure, compile_error
from loopwright.types import SamplingParams, TensorData

__all__ = ["LIMITS", "sample_options", "structure_check"]

LIMITS = {"topk_sample_logprobs": 20, "prompt_alt_tokens_k": 64, "target_prompt_logprobs": 64}
"""Most tokens per position each option may ask for (the worker also bounds len(prompt) × k)."""


class OptionError(DomainError):
    code = "invalid_sampling_option"


def _count(body: dict, name: str, high: int) -> int:
    value = body.get(name, 0)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise OptionError(f"{name}: an integer from 0 to {high}, got {value!r}", field=name)
    return value


def _prompt_length(body: dict) -> int | None:
    chunks = (
        (body.get("prompt") or {}).get("chunks") if isinstance(body.get("prompt"), dict) else None
    )
    if not isinstance(chunks, list):
        return None
    total = 0
    for chunk in chunks:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("tokens"), list):
            return None  # not all tokens (images): the worker checks it
        total += len(chunk["tokens"])
    return total


def _check(body: dict) -> None:
    length = _prompt_length(body)
    scored = length - 1 if length is not None else None
    _count(body, "topk_sample_logprobs", LIMITS["topk_sample_logprobs"])
    _count(body, "prompt_alt_tokens_k", LIMITS["prompt_alt_tokens_k"])
    last_n = body.get("prompt_logprobs_last_n")
    if last_n is not None:
        if not isinstance(last_n, int) or isinstance(last_n, bool) or last_n < 1:
            raise OptionError(
                "prompt_logprobs_last_n: a positive integer", field="prompt_logprobs_last_n"
            )
        if not body.get("prompt_logprobs") and not body.get("topk_prompt_logprobs"):
            raise OptionError(
                "prompt_logprobs_last_n needs prompt_logprobs (or topk_prompt_logprobs)",
                field="prompt_logprobs_last_n",
            )
        if scored is not None and last_n > scored:
            raise OptionError(
                f"prompt_logprobs_last_n: at most len(prompt) - 1 = {scored}, got {last_n}",
                field="prompt_logprobs_last_n",
            )
    target = body.get("target_prompt_logprobs")
    if target is not None:
        _check_target(target, scored)


def _check_target(value: Any, scored: int | None) -> None:
    field = "target_prompt_logprobs"
    try:
        tensor = TensorData.model_validate(value)
    except ValidationError as exc:
        raise OptionError(f"{field}: {exc.errors()[0]['msg']}", field=field) from None
    shape = tensor.shape or [len(tensor.data)]
    if tensor.dtype != "int64" or len(shape) != 2:
        raise OptionError(f"{field}: an int64 tensor of shape [len(prompt) - 1, K]", field=field)
    if scored is not None and shape[0] != scored:
        raise OptionError(
            f"{field}: {shape[0]} rows, but the prompt has len(prompt) - 1 = {scored} positions",
            field=field,
        )
    if not 1 <= shape[1] <= LIMITS[field]:
        raise OptionError(
            f"{field}: K must be from 1 to {LIMITS[field]}, got {shape[1]}", field=field
        )
    if tensor.data and min(tensor.data) < -1:  # type: ignore[type-var]
        raise OptionError(f"{field}: token ids, or -1 for an empty cell", field=field)


def structure_check(params: SamplingParams) -> None:
    """Refuse a schema, regex or grammar llguidance cannot compile (within its limits), naming
    the field and saying why, before the request is taken."""
    structure = Structure.of(params)
    if structure is None:
        return
    error = compile_error(structure)
    if error is not None:
        field = f"sampling_params.{structure.kind}"
        raise OptionError(f"{field}: cannot be compiled: {error}", field=field)


def sample_options(body: dict) -> None:
    """Check ``body``'s sampling options against the prompt and the limits; a 400 naming the
    option otherwise."""
    _check(body)
