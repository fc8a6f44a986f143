"""Training models: creating one (a LoRA on a base model), describing it, unloading it."""

from __future__ import annotations

from typing import Literal

from ._base import RequestModel, ResponseModel
from .limits import BaseModelName, ContextLength, Counter, Id, Metadata, Replicas
from .lora import LoraConfig
from .optim import OptimizerConfig
from .queue import QueueStatus

__all__ = [
    "CreateModelRequest",
    "CreateModelResponse",
    "GetInfoRequest",
    "GetInfoResponse",
    "ModelData",
    "UnloadModelRequest",
    "UnloadModelResponse",
]


class CreateModelRequest(RequestModel):
    """Create a training model: a fresh LoRA adapter on a base model."""

    session_id: Id
    """The client session it belongs to."""

    model_seq_id: Counter
    """Counter of models within the client session."""

    base_model: BaseModelName
    """Name of the base model to fine-tune; tinker's ``<base>:peft:<n>`` names ask for a
    context of ``n`` tokens, as ``context_length`` does."""

    user_metadata: Metadata | None = None
    """Free-form metadata of the training run, set by the user."""

    lora_config: LoraConfig | None = None
    """Shape of the adapter."""

    optimizer_config: OptimizerConfig | None = None
    """Optimizer family, fixed for the model's lifetime: ``{"type": "adamw"}`` (None means the
    same) or ``{"type": "dimuon", "version": 1}``."""

    replicas: Replicas | None = None
    """Data-parallel workers the model trains on, each holding the whole base and the adapter;
    None means 1 (Loopwright extension). At most the account's ``max_replicas`` quota and the
    number of live workers that serve the base model."""

    context_length: ContextLength | None = None
    """The context its requests are held to, in tokens, at most the base model's maximum; None
    means the session's, else that maximum (Loopwright extension). Priced per token as any
    other: the setting costs nothing by itself."""

    type: Literal["create_model"] = "create_model"
    """Request kind tag."""


class CreateModelResponse(ResponseModel):
    """The created training model."""

    model_id: str
    """Id of the new model (also its training run id)."""

    type: Literal["create_model"] = "create_model"
    """Response kind tag."""


class GetInfoRequest(RequestModel):
    """Ask for a training model's description."""

    model_id: Id
    """The model to describe."""

    type: Literal["get_info"] = "get_info"
    """Request kind tag."""


class ModelData(ResponseModel):
    """Architecture and naming of a model."""

    arch: str | None = None
    """Architecture identifier."""

    model_name: str | None = None
    """Model name; the SDK loads its tokenizer with AutoTokenizer.from_pretrained."""

    tokenizer_id: str | None = None
    """Tokenizer identifier, when it differs from model_name."""


class GetInfoResponse(ResponseModel):
    """A training model's description."""

    type: Literal["get_info"] | None = None
    """Response kind tag."""

    model_data: ModelData
    """Architecture and naming."""

    model_id: str
    """The model's id."""

    is_lora: bool | None = None
    """Whether the model is a LoRA adapter."""

    lora_rank: int | None = None
    """The adapter's rank, if a LoRA."""

    model_name: str | None = None
    """The model's name."""

    session_id: str | None = None
    """The session the model lives in (Loopwright)."""

    next_seq_id: int | None = None
    """The seq_id after the highest one submitted to the model so far (Loopwright): where a
    client that attaches to the model continues."""

    next_sampling_session_seq_id: int | None = None
    """The sampling_session_seq_id after the highest one used in the model's session so far
    (Loopwright): where the samplers of a client that attaches to the model continue."""

    replicas: int | None = None
    """Data-parallel workers the model trains on (Loopwright); 1: one worker."""

    optimizer: str | None = None
    """The model's optimizer family, ``adamw`` or ``dimuon`` (Loopwright)."""

    placement: str | None = None
    """"placed", or why it waits for a worker ("waiting_for_capacity", "waiting_for_worker",
    "waiting_for_network") (Loopwright)."""

    status_reason: str | None = None
    """Why it waits, for people; empty once placed (Loopwright)."""

    queue: QueueStatus | None = None
    """Its place in the placement queue while it waits (Loopwright)."""

    context_length: int | None = None
    """The context its requests are held to, in tokens (Loopwright)."""


class UnloadModelRequest(RequestModel):
    """Release a training model's resources."""

    model_id: Id
    """The model to unload."""

    type: Literal["unload_model"] = "unload_model"
    """Request kind tag."""


class UnloadModelResponse(ResponseModel):
    """Confirms an unload."""

    model_id: str
    """The unloaded model."""

    type: Literal["unload_model"] | None = None
    """Response kind tag."""
