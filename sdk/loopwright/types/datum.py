"""Datum: one training example, a ModelInput plus the named tensors its loss function reads.

Loss inputs may be given as numpy arrays, lists or torch tensors; they become TensorData.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator

from ._base import RequestModel
from .model_input import ModelInput
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

    @field_validator("loss_fn_inputs", mode="before")
    @classmethod
    def _coerce_arrays(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {key: _to_tensor_data(key, item) for key, item in value.items()}


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
