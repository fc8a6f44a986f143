"""The optimizer: its choice at model creation, the hyperparameters of a step, its answer.

AdamW is the one optimizer Loopwright runs. tinker's Dimuon (``{"type": "dimuon", ...}``) is
refused with a message that names it: its update rule is not published precisely enough to
implement.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ._base import RequestModel, ResponseModel
from .limits import Id, SeqId

__all__ = [
    "SUPPORTED_OPTIMIZERS",
    "AdamOptimizerConfig",
    "AdamParams",
    "OptimStepRequest",
    "OptimStepResponse",
    "unsupported_optimizer",
]

SUPPORTED_OPTIMIZERS = ("adamw",)


def unsupported_optimizer(kind: object) -> str:
    """Why an optimizer family other than AdamW is refused."""
    if kind == "dimuon":
        return (
            "the dimuon optimizer is not supported by this server: its update rule is not "
            "published precisely enough to implement; use adamw (AdamParams)"
        )
    return f"unknown optimizer {kind!r}; supported: {', '.join(SUPPORTED_OPTIMIZERS)}"


class AdamOptimizerConfig(RequestModel):
    """Selects AdamW for a training model, fixed for its lifetime (the default)."""

    type: Literal["adamw"] = "adamw"
    """Optimizer family."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_other_families(cls, value: Any) -> Any:
        kind = value.get("type", "adamw") if isinstance(value, dict) else "adamw"
        if kind not in SUPPORTED_OPTIMIZERS:
            raise ValueError(unsupported_optimizer(kind))
        return value


class AdamParams(RequestModel):
    """Hyperparameters of one AdamW step."""

    learning_rate: Annotated[float, Field(ge=0, le=10)] = 1e-4
    """Step size: 0 to 10."""

    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    """Decay rate of the running mean of gradients: 0 to below 1."""

    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    """Decay rate of the running mean of squared gradients: 0 to below 1."""

    eps: Annotated[float, Field(ge=0, le=1)] = 1e-12
    """Added to the denominator for numerical stability: 0 to 1."""

    weight_decay: Annotated[float, Field(ge=0, le=10)] = 0.0
    """Decoupled weight decay: 0 to 10."""

    grad_clip_norm: Annotated[float, Field(ge=0, le=1e9)] = 0.0
    """Clip the global gradient norm to this value; 0 turns clipping off: 0 to 1e9."""


class OptimStepRequest(RequestModel):
    """Apply the accumulated gradients of a model and clear them."""

    adam_params: AdamParams
    """Hyperparameters of this step."""

    model_id: Id
    """The training model to update."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""

    type: Literal["optim_step"] = "optim_step"
    """Request kind tag."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_other_families(cls, value: Any) -> Any:
        # tinker sends non-Adam hyperparameters as optimizer_params instead of adam_params.
        if isinstance(value, dict) and "optimizer_params" in value:
            params = value["optimizer_params"]
            kind = params.get("type") if isinstance(params, dict) else params
            raise ValueError(f"optimizer_params: {unsupported_optimizer(kind)}")
        return value


class OptimStepResponse(ResponseModel):
    """The result of an optimizer step."""

    metrics: dict[str, float] | None = None
    """Step metrics keyed "name:reduction", if any."""
