"""Loss functions: their names, the input of a forward(-backward) pass and its output."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from ._base import RequestModel, ResponseModel
from .datum import Datum
from .limits import MAX_DATUMS
from .tensor_data import TensorData

__all__ = [
    "UNSUPPORTED_LOSSES",
    "ForwardBackwardInput",
    "ForwardBackwardOutput",
    "LossFnOutput",
    "LossFnType",
]

LossFnType = Literal[
    "cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce"
]

UNSUPPORTED_LOSSES: dict[str, str] = {
    "custom": (
        "custom is not supported by this server: server-side custom losses "
        "(create_custom_loss) do not run here; forward_backward_custom computes the loss on "
        "your machine instead"
    ),
}
"""Loss names of the tinker protocol that Loopwright refuses, with the reason it gives."""

LossFnOutput = dict[str, TensorData]


class ForwardBackwardInput(RequestModel):
    """A batch of data and the loss to compute on it."""

    loss_fn: LossFnType
    """Which built-in loss to compute."""

    data: Annotated[list[Datum], Field(min_length=1, max_length=MAX_DATUMS)]
    """The examples of the batch: 1 to 1,024 (a client splits larger batches)."""

    loss_fn_config: (
        Annotated[
            dict[
                Annotated[str, Field(max_length=64)],
                Annotated[float, Field(allow_inf_nan=False)]
                | Annotated[str, Field(max_length=256)],
            ],
            Field(max_length=16),
        ]
        | None
    ) = None
    """Loss parameters: clip_low_threshold and clip_high_threshold for ppo, cispo and gspo,
    beta for dro, mask_low, mask_high and kl_coeff for stable_reinforce. Values may be numbers
    or strings (tinker's loss_fn_config_v2); each loss says which kind each key takes."""

    @field_validator("loss_fn", mode="before")
    @classmethod
    def _refuse_unsupported(cls, value: Any) -> Any:
        if isinstance(value, str) and value in UNSUPPORTED_LOSSES:
            raise ValueError(UNSUPPORTED_LOSSES[value])
        return value


class ForwardBackwardOutput(ResponseModel):
    """The result of a forward or forward-backward pass."""

    loss_fn_output_type: str
    """Name of the kind of per-datum output records."""

    loss_fn_outputs: list[LossFnOutput]
    """Per datum, tensors by name (always including logprobs)."""

    metrics: dict[str, float] = Field(default_factory=dict)
    """Metrics keyed "name:reduction" (sum, mean, min, max), e.g. "loss:sum"."""
