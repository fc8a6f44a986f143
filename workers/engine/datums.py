"""Validate datums against a base model: token ids and loss inputs as 1-D arrays.

Validation happens before any tensor touches the model, so a bad datum never half-applies.
Position ``i`` of a datum's input predicts ``target_tokens[i]``; every loss input has the
input's length ``N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loopwright.types import Datum

from .errors import InvalidInput
from .losses import LossSpec
from .vision import Pixels, VisionInputs

_INT_INPUTS = {"target_tokens"}


@dataclass
class PackedDatum:
    """One validated datum: its tokens and its loss inputs as 1-D arrays of length N."""

    index: int
    tokens: np.ndarray
    inputs: dict[str, np.ndarray]
    pixels: Pixels | None = None  # its images' tensors, when its input holds images

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])


def tokens_of(
    model_input: object,
    field: str,
    vocab_size: int,
    context_length: int,
    vision: VisionInputs | None = None,
) -> tuple[np.ndarray, Pixels | None]:
    """The token ids of a ModelInput, checked against the vocabulary and the context, and the
    pixels of its images (a vision-language model's: each image is its image tokens)."""
    pixels = None
    try:
        if vision is not None:
            expanded = vision.expand(model_input, field)
            tokens, pixels = np.asarray(expanded.tokens, dtype=np.int64), expanded.pixels
        else:
            tokens = np.asarray(model_input.to_ints(), dtype=np.int64)  # type: ignore[attr-defined]
    except (ValueError, TypeError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput(
            field, f"only encoded_text chunks are supported by this base model ({exc})"
        ) from exc
    if tokens.size == 0:
        raise InvalidInput(field, "is empty")
    if tokens.size > context_length:
        raise InvalidInput(
            field, f"has {tokens.size} tokens, over the model's context length {context_length}"
        )
    _check_token_range(tokens, field, vocab_size)
    return tokens, pixels


def _check_token_range(tokens: np.ndarray, field: str, vocab_size: int) -> None:
    bad = np.flatnonzero((tokens < 0) | (tokens >= vocab_size))
    if bad.size:
        i = int(bad[0])
        raise InvalidInput(
            field,
            f"token id {int(tokens[i])} at position {i} is outside the vocabulary [0, {vocab_size})",
        )


def validate_datums(
    data: Sequence[Datum],
    spec: LossSpec,
    loss_name: str,
    vocab_size: int,
    context_length: int,
    vision: VisionInputs | None = None,
) -> list[PackedDatum]:
    if not data:
        raise InvalidInput("data", "must hold at least one datum")
    packed = []
    for i, datum in enumerate(data):
        where = f"data[{i}]"
        tokens, pixels = tokens_of(
            datum.model_input, f"{where}.model_input", vocab_size, context_length, vision
        )
        inputs = _loss_inputs(datum, where, tokens.size, spec, loss_name, vocab_size)
        packed.append(PackedDatum(i, tokens, inputs, pixels))
    return packed


def _loss_inputs(
    datum: Datum, where: str, n: int, spec: LossSpec, loss_name: str, vocab_size: int
) -> dict[str, np.ndarray]:
    given = datum.loss_fn_inputs
    for key in given:
        if key not in spec.accepted_inputs:
            raise InvalidInput(
                f"{where}.loss_fn_inputs.{key}",
                f"not an input of {loss_name}; accepted: {list(spec.accepted_inputs)}",
            )
    for key in ("target_tokens", *spec.required):
        if key not in given:
            raise InvalidInput(f"{where}.loss_fn_inputs.{key}", f"required by {loss_name}")
    out: dict[str, np.ndarray] = {}
    for key, tensor in given.items():
        field = f"{where}.loss_fn_inputs.{key}"
        try:
            arr = np.asarray(tensor.to_numpy())
        except (ValueError, TypeError) as exc:
            raise InvalidInput(field, f"cannot be decoded ({exc})") from exc
        arr = arr.reshape(-1) if arr.ndim == 1 else arr
        if arr.ndim != 1 or arr.shape[0] != n:
            raise InvalidInput(
                field, f"has shape {list(arr.shape)}, expected [{n}] (the input's length)"
            )
        if key in _INT_INPUTS:
            if arr.dtype.kind not in "iu":
                raise InvalidInput(field, "must be int64 token ids")
            arr = arr.astype(np.int64)
            _check_token_range(arr, field, vocab_size)
        else:
            arr = arr.astype(np.float32)
            if not np.isfinite(arr).all():
                i = int(np.flatnonzero(~np.isfinite(arr))[0])
                raise InvalidInput(field, f"holds a non-finite value ({arr[i]}) at position {i}")
        out[key] = arr
    if "weights" in spec.accepted_inputs and "weights" not in out:
        out["weights"] = np.ones(n, dtype=np.float32)
    if spec.check_datum is not None:
        spec.check_datum(out, where)
    return out
