"""The optimizer step: Adam hyperparameters, its request and its answer."""

from __future__ import annotations

from typing import Literal

from ._base import RequestModel, ResponseModel

__all__ = ["AdamParams", "OptimStepRequest", "OptimStepResponse"]


class AdamParams(RequestModel):
    """Hyperparameters of one AdamW step."""

    learning_rate: float = 1e-4
    """Step size."""

    beta1: float = 0.9
    """Decay rate of the running mean of gradients."""

    beta2: float = 0.95
    """Decay rate of the running mean of squared gradients."""

    eps: float = 1e-12
    """Added to the denominator for numerical stability."""

    weight_decay: float = 0.0
    """Decoupled weight decay."""

    grad_clip_norm: float = 0.0
    """Clip the global gradient norm to this value; 0 turns clipping off."""


class OptimStepRequest(RequestModel):
    """Apply the accumulated gradients of a model and clear them."""

    adam_params: AdamParams
    """Hyperparameters of this step."""

    model_id: str
    """The training model to update."""

    seq_id: int | None = None
    """Per-model request counter; requests run in seq_id order."""

    type: Literal["optim_step"] = "optim_step"
    """Request kind tag."""


class OptimStepResponse(ResponseModel):
    """The result of an optimizer step."""

    metrics: dict[str, float] | None = None
    """Step metrics keyed "name:reduction", if any."""
