"""Datum: one training example, a ModelInput plus the named tensors its loss function reads, and
optionally the provenance of its positions (``with_provenance``).

Loss inputs may be given as numpy arrays, lists or torch tensors; they become TensorData.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import numpy as np
from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ._base import RequestModel
from .chunks import EncodedTextChunk, ImageChunk
from .model_input import ModelInput
from .provenance import ProvenanceSpans
from .tensor_data import TensorData, TensorDtype, dtype_for_numpy

__all__ = ["LOSS_INPUT_DTYPES", "Datum", "LossFnInputs"]

LossFnInputs = dict[str, TensorData]

LOSS_INPUT_DTYPES: dict[str, TensorDtype] = {
    "target_tokens": "int64",
    "weights": "float32",
    "advantages": "float32",
    "logprobs": "float32",
    "clip_low_threshold": "float32",
    "clip_high_threshold": "float32",
    "sequence_ratio_mask": "float32",
    "sampled_mask": "float32",
}
"""The wire dtype of each well-known loss input; other names keep their inferred dtype."""


class Datum(RequestModel):
    """One example: the input tokens and the per-token tensors of its loss."""

    loss_fn_inputs: Annotated[
        dict[Annotated[str, Field(min_length=1, max_length=64)], TensorData], Field(max_length=16)
    ]
    """Loss inputs by name (e.g. target_tokens, weights, advantages, logprobs): at most 16."""

    model_input: ModelInput
    """The tokens fed to the model; position i predicts target_tokens[i]."""

    model_input_spans: ProvenanceSpans | None = None
    """Where each input token came from: consecutive runs tiling ``model_input`` (their lengths
    sum to its length), each a run of a recorded sequence's prompt or sampled tokens. Set
    together with ``loss_fn_input_spans`` (``with_provenance``)."""

    loss_fn_input_spans: ProvenanceSpans | None = None
    """Where each target came from: consecutive runs tiling ``loss_fn_inputs["target_tokens"]``.
    Set together with ``model_input_spans``."""

    @field_validator("loss_fn_inputs", mode="before")
    @classmethod
    def _coerce_arrays(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {key: _to_tensor_data(key, item) for key, item in value.items()}

    @model_validator(mode="after")
    def _spans_tile(self) -> Datum:
        if (self.model_input_spans is None) != (self.loss_fn_input_spans is None):
            raise ValueError(
                "provenance comes as a pair: give model_input_spans and loss_fn_input_spans, "
                "or neither"
            )
        if self.model_input_spans is None or self.loss_fn_input_spans is None:
            return self
        if not all(isinstance(c, EncodedTextChunk | ImageChunk) for c in self.model_input.chunks):
            raise ValueError(
                "provenance needs a model_input of token and inline image chunks only (each "
                "image with its expected_tokens, the positions it takes)"
            )
        _check_tiling("model_input_spans", self.model_input_spans, self.model_input.length)
        targets = self.loss_fn_inputs.get("target_tokens")
        if targets is None:
            raise ValueError(
                "loss_fn_input_spans tile loss_fn_inputs.target_tokens, which is missing"
            )
        if targets.is_sparse or (targets.shape is not None and len(targets.shape) != 1):
            raise ValueError("provenance needs dense one-dimensional target_tokens")
        _check_tiling("loss_fn_input_spans", self.loss_fn_input_spans, _length(targets))
        return self

    @model_serializer(mode="wrap")
    def _without_absent_spans(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a datum without provenance serializes as it did before spans existed
        out = handler(self)
        for name in _SPAN_FIELDS:
            if out.get(name, 0) is None:
                del out[name]
        return out

    def with_provenance(
        self, model_input: ProvenanceSpans, loss_fn_inputs: ProvenanceSpans
    ) -> Datum:
        """A copy carrying the provenance of both fields: ``model_input`` runs tile the input
        tokens, ``loss_fn_inputs`` runs tile ``target_tokens``. A miscounted tiling raises here."""
        return Datum(
            model_input=self.model_input,
            loss_fn_inputs=self.loss_fn_inputs,
            model_input_spans=list(model_input),
            loss_fn_input_spans=list(loss_fn_inputs),
        )


_SPAN_FIELDS = ("model_input_spans", "loss_fn_input_spans")


def _length(tensor: TensorData) -> int:
    return int(tensor.shape[0]) if tensor.shape else len(tensor.data)


def _check_tiling(name: str, spans: ProvenanceSpans, expected: int) -> None:
    total = sum(span.length for span in spans)
    if total != expected:
        field = "model_input" if name == "model_input_spans" else "target_tokens"
        raise ValueError(
            f"{name} cover {total} positions but {field} has {expected}: the runs must tile it "
            "exactly"
        )


def _to_tensor_data(key: str, value: Any) -> Any:
    """Turn an array-like into TensorData; leaves TensorData and JSON dicts to the validator."""
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is already imported
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = value.float() if value.is_floating_point() else value.long()
        value = value.numpy()
    elif isinstance(value, list | tuple):
        try:
            value = np.asarray(value)
        except ValueError as exc:
            raise ValueError(f"{key} must be a rectangular numeric array") from exc
        if value.dtype == object:
            raise ValueError(f"{key} must be a rectangular numeric array")
    if not isinstance(value, np.ndarray):
        return value
    dtype = LOSS_INPUT_DTYPES.get(key) or dtype_for_numpy(value.dtype)
    return TensorData.from_numpy(value.astype(np.int64 if dtype == "int64" else np.float32))
