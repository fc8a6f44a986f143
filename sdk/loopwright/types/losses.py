"""Loss functions: their names, the input of a forward(-backward) pass and its output."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import RequestModel, ResponseModel
from .datum import Datum
from .tensor_data import TensorData

__all__ = ["ForwardBackwardInput", "ForwardBackwardOutput", "LossFnOutput", "LossFnType"]

LossFnType = Literal["cross_entropy", "importance_sampling", "ppo", "cispo", "dro"]

LossFnOutput = dict[str, TensorData]


class ForwardBackwardInput(RequestModel):
    """A batch of data and the loss to compute on it."""

    data: list[Datum]
    """The examples of the batch."""

    loss_fn: LossFnType
    """Which built-in loss to compute."""

    loss_fn_config: dict[str, float] | None = None
    """Loss parameters, e.g. clip_low_threshold and clip_high_threshold for ppo, beta for dro."""


class ForwardBackwardOutput(ResponseModel):
    """The result of a forward or forward-backward pass."""

    loss_fn_output_type: str
    """Name of the kind of per-datum output records."""

    loss_fn_outputs: list[LossFnOutput]
    """Per datum, tensors by name (always including logprobs)."""

    metrics: dict[str, float] = Field(default_factory=dict)
    """Metrics keyed "name:reduction" (sum, mean, min, max), e.g. "loss:sum"."""
