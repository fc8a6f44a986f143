"""The optimizer: its family at model creation, the hyperparameters of a step, its answer.

Two families, as in tinker 0.38: AdamW (the default; ``AdamParams`` as ``adam_params``) and
Dimuon version 1 (``DimuonOptimizerConfig``; ``DimuonParams`` as ``optimizer_params``). The
family is fixed for a model's lifetime: a step must send its family's hyperparameters.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from ._base import RequestModel, ResponseModel
from .limits import Id, SeqId

__all__ = [
    "SUPPORTED_OPTIMIZERS",
    "AdamOptimizerConfig",
    "AdamParams",
    "DimuonOptimizerConfig",
    "DimuonParams",
    "OptimParams",
    "OptimStepRequest",
    "OptimStepResponse",
    "OptimizerConfig",
    "params_family",
    "unsupported_optimizer",
]

SUPPORTED_OPTIMIZERS = ("adamw", "dimuon")


def unsupported_optimizer(kind: object) -> str:
    """Why an optimizer family is refused."""
    return f"unknown optimizer {kind!r}; supported: {', '.join(SUPPORTED_OPTIMIZERS)}"


class AdamOptimizerConfig(RequestModel):
    """Selects AdamW for a training model, fixed for its lifetime (the default)."""

    type: Literal["adamw"] = "adamw"
    """Optimizer family."""


class DimuonOptimizerConfig(RequestModel):
    """Selects Dimuon for a training model, fixed for its lifetime: orthogonalised momentum on
    each LoRA matrix (docs/tinker-protocol.md, section "Dimuon")."""

    type: Literal["dimuon"] = "dimuon"
    """Optimizer family."""

    version: Literal[1] = 1
    """Version of Dimuon's update; 1 is the one there is."""


def _family_tagged(value: Any) -> Any:
    """A config without ``type`` is AdamW; an unknown family is refused with the ones there are."""
    if isinstance(value, dict):
        kind = value.get("type", "adamw")
        if kind not in SUPPORTED_OPTIMIZERS:
            raise ValueError(unsupported_optimizer(kind))
        return {**value, "type": kind}
    return value


OptimizerConfig = Annotated[
    AdamOptimizerConfig | DimuonOptimizerConfig,
    Field(discriminator="type"),
    BeforeValidator(_family_tagged),
]
"""The optimizer family of a model, chosen when it is made."""


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


class DimuonParams(RequestModel):
    """Hyperparameters of one Dimuon step (tinker 0.38's ``DimuonParams``)."""

    type: Literal["dimuon"] = "dimuon"
    """Optimizer family of this step."""

    learning_rate: Annotated[float, Field(ge=0, le=10)]
    """Step size, applied to a direction of Frobenius norm sqrt(rank) on every LoRA matrix:
    0 to 10."""

    grad_clip_norm: Annotated[float, Field(ge=-1e9, le=1e9)] = 0.0
    """Clip the global gradient norm to this value; 0 or below turns clipping off."""

    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    """Decay rate of the momentum (a running mean of gradients): 0 to below 1."""


OptimParams = AdamParams | DimuonParams
"""One step's hyperparameters, of the model's optimizer family."""


def params_family(params: OptimParams) -> str:
    """The optimizer family a step's hyperparameters are for."""
    return "adamw" if isinstance(params, AdamParams) else params.type


def _dimuon_tagged(value: Any) -> Any:
    kind = value.get("type", "dimuon") if isinstance(value, dict) else None
    if kind == "adamw":
        raise ValueError("AdamW's hyperparameters go in adam_params (AdamParams)")
    if isinstance(value, dict) and kind not in SUPPORTED_OPTIMIZERS:
        raise ValueError(unsupported_optimizer(kind))
    return value


class OptimStepRequest(RequestModel):
    """Apply the accumulated gradients of a model and clear them, with the hyperparameters of
    its optimizer family: ``adam_params`` for AdamW, ``optimizer_params`` for Dimuon (as tinker
    sends them)."""

    adam_params: AdamParams | None = None
    """Hyperparameters of an AdamW step."""

    optimizer_params: Annotated[DimuonParams, BeforeValidator(_dimuon_tagged)] | None = None
    """Hyperparameters of a step of another family (Dimuon)."""

    model_id: Id
    """The training model to update."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""

    type: Literal["optim_step"] = "optim_step"
    """Request kind tag."""

    @model_validator(mode="after")
    def _one_family(self) -> OptimStepRequest:
        if (self.adam_params is None) == (self.optimizer_params is None):
            raise ValueError(
                "give adam_params (AdamW) or optimizer_params (Dimuon): exactly one of them"
            )
        return self

    @model_serializer(mode="wrap")
    def _without_the_other(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # the family not sent is not written: an AdamW step's body is what it always was
        data = handler(self)
        for key in ("adam_params", "optimizer_params"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def params(self) -> OptimParams:
        """This step's hyperparameters, whichever family they are for."""
        return self.adam_params if self.adam_params is not None else self.optimizer_params  # type: ignore[return-value]


class OptimStepResponse(ResponseModel):
    """The result of an optimizer step."""

    metrics: dict[str, float] | None = None
    """Step metrics keyed "name:reduction", if any."""
