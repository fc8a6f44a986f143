"""Token ids against the base model's vocabulary, checked when a request arrives: an id past
the vocabulary is the caller's mistake, refused with a 400 naming it, rather than an
operation that fails on the worker later. The workers register each base model's vocabulary
size; until one has, the worker's own check is the only one."""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.errors import DomainError
from controlplane.fleet.models import BaseModel

TOKEN_INPUTS = ("target_tokens",)  # loss inputs that hold token ids


def highest_token(batch: dict | None) -> int | None:
    """The highest token id a forward(-backward) batch (its JSON) holds, None if none."""
    if not batch:
        return None
    highest: int | None = None
    for datum in batch.get("data") or ():
        for chunk in (datum.get("model_input") or {}).get("chunks") or ():
            highest = _max(highest, chunk.get("tokens"))
        for name in TOKEN_INPUTS:
            tensor = (datum.get("loss_fn_inputs") or {}).get(name)
            if tensor and tensor.get("dtype") == "int64":
                highest = _max(highest, tensor.get("data"))
    return highest


def highest_sampled(payload: dict) -> int | None:
    """The highest token id of a sample request: its prompt and stop token ids."""
    highest = highest_token({"data": [{"model_input": payload.get("prompt")}]})
    stop = (payload.get("sampling_params") or {}).get("stop")
    if isinstance(stop, list) and stop and isinstance(stop[0], int):
        highest = _max(highest, stop)
    return highest


def highest_biased(payload: dict) -> int | None:
    """The highest token id a sample request's ``logit_bias`` names."""
    bias = (payload.get("sampling_params") or {}).get("logit_bias")
    return _max(None, [int(token) for token in bias] if bias else None)


def _max(highest: int | None, values: Iterable | None) -> int | None:
    if not values:
        return highest
    top = int(max(values))
    return top if highest is None or top > highest else highest


def vocab_size(base_model: str) -> int | None:
    return BaseModel.objects.filter(name=base_model).values_list("vocab_size", flat=True).first()


def vocab_check(*, base_model: str, highest: int | None, field: str) -> None:
    """Refuse ``highest`` if it is past ``base_model``'s vocabulary."""
    if highest is None:
        return
    size = vocab_size(base_model)
    if size is not None and highest >= size:
        raise DomainError(
            f"{field}: token id {highest} is outside the vocabulary of {base_model} [0, {size})",
            field=field,
        )
