"""Loss functions: their names, the input of a forward(-backward) pass and its output."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ._base import RequestModel, ResponseModel
from .datum import Datum
from .limits import MAX_DATUMS
from .tensor_data import TensorData

__all__ = [
    "STABLE_REINFORCE_CONFIG",
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

STABLE_REINFORCE_CONFIG: dict[str, float] = {"mask_low": 0.5, "mask_high": 5.0, "kl_coeff": 0.0}
"""stable_reinforce's ``loss_fn_config`` keys and their defaults (docs/tinker-protocol.md)."""

_STABLE_REINFORCE_LIMITS = {
    "mask_low": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "mask_high": (lambda v: 1 <= v < math.inf, "≥ 1"),
    "kl_coeff": (lambda v: v >= 0, "≥ 0"),
}


def stable_reinforce_config_problem(config: Mapping[str, float]) -> tuple[str, str] | None:
    """The first key of a stable_reinforce config whose value is out of range, and why."""
    for key, (ok, limit) in _STABLE_REINFORCE_LIMITS.items():
        value = config.get(key, STABLE_REINFORCE_CONFIG[key])
        if not ok(value):
            return key, f"{value} is not {limit}"
    return None


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

    @field_validator("loss_fn_config")
    @classmethod
    def _stable_reinforce_config(cls, value: Any, info: ValidationInfo) -> Any:
        # stable_reinforce's keys are checked here, so that a bad one is refused on arrival
        if value is None or info.data.get("loss_fn") != "stable_reinforce":
            return value
        for key, number in value.items():
            if key not in STABLE_REINFORCE_CONFIG:
                raise ValueError(
                    f"{key}: not a parameter of stable_reinforce; accepted: "
                    f"{sorted(STABLE_REINFORCE_CONFIG)}"
                )
            if isinstance(number, str):
                raise ValueError(f"{key}: must be a number, not the text {number!r}")
        problem = stable_reinforce_config_problem(value)
        if problem is not None:
            raise ValueError(": ".join(problem))
        return value


class ForwardBackwardOutput(ResponseModel):
    """The result of a forward or forward-backward pass."""

    loss_fn_output_type: str
    """Name of the kind of per-datum output records."""

    loss_fn_outputs: list[LossFnOutput]
    """Per datum, tensors by name (always including logprobs)."""

    metrics: dict[str, float] = Field(default_factory=dict)
    """Metrics keyed "name:reduction" (sum, mean, min, max), e.g. "loss:sum"."""
