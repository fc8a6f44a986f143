"""Saving and loading weights: training state, sampler weights, and checkpoint metadata."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._base import RequestModel, ResponseModel
from .limits import (
    BaseModelName,
    CheckpointName,
    Counter,
    Id,
    Metadata,
    SeqId,
    ShortText,
    StrMetadata,
    TinkerPath,
    TtlSeconds,
)
from .optim import OptimizerConfig

__all__ = [
    "CopyWeightsRequest",
    "CopyWeightsResponse",
    "LoadWeightsRequest",
    "LoadWeightsResponse",
    "SaveWeightsExternalRequest",
    "SaveWeightsForSamplerRequest",
    "SaveWeightsForSamplerResponse",
    "SaveWeightsForSamplerResponseInternal",
    "SaveWeightsRequest",
    "SaveWeightsResponse",
    "WeightsInfoRequest",
    "WeightsInfoResponse",
]


class SaveWeightsRequest(RequestModel):
    """Save a model's training state (adapter and optimizer) as tinker://<model_id>/weights/<path>."""

    model_id: Id
    """The model to save."""

    path: CheckpointName | None = None
    """Checkpoint name."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""

    ttl_seconds: TtlSeconds | None = None
    """Seconds until the checkpoint expires; None keeps it."""

    overwrite: bool = False
    """Whether to replace an existing checkpoint of the same name."""

    user_metadata: StrMetadata | None = None
    """Free-form metadata of the checkpoint, set by the user (kept with its save)."""

    type: Literal["save_weights"] = "save_weights"
    """Request kind tag."""


class SaveWeightsResponse(ResponseModel):
    """Where the training state was saved."""

    path: str
    """tinker:// path of the checkpoint."""

    type: Literal["save_weights"] | None = None
    """Response kind tag."""


class SaveWeightsForSamplerRequest(RequestModel):
    """Save sampler weights, named (path) or for a new sampling session (sampling_session_seq_id)."""

    model_id: Id
    """The model to save."""

    path: CheckpointName | None = None
    """Checkpoint name, for a named save."""

    sampling_session_seq_id: Counter | None = None
    """Sampling session counter, for an unnamed save that opens a sampling session."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""

    ttl_seconds: TtlSeconds | None = None
    """Seconds until the checkpoint expires; None keeps it."""

    merge_weights: bool = False
    """Also write a deployable model with the adapter merged into the base (Loopwright extension)."""

    kind: Literal["snapshot", "inflight"] = "snapshot"
    """For an unnamed save: ``snapshot`` samples the weights as of the save; ``inflight`` is
    served the same way here (the weights as of the save, in seq_id order, which meets its
    "these weights or newer" guarantee); a later save gives a new sampler."""

    user_metadata: StrMetadata | None = None
    """Free-form metadata of the checkpoint, set by the user (kept with its save)."""

    type: Literal["save_weights_for_sampler"] = "save_weights_for_sampler"
    """Request kind tag."""


class SaveWeightsForSamplerResponseInternal(ResponseModel):
    """Either a named sampler checkpoint or a sampling session on unnamed weights."""

    path: str | None = None
    """tinker:// path of the sampler weights, for a named save."""

    sampling_session_id: str | None = None
    """The opened sampling session, for an unnamed save."""

    type: Literal["save_weights_for_sampler"] | None = None
    """Response kind tag."""


class SaveWeightsForSamplerResponse(ResponseModel):
    """Where named sampler weights were saved."""

    path: str
    """tinker:// path of the sampler weights."""

    type: Literal["save_weights_for_sampler"] | None = None
    """Response kind tag."""


class SaveWeightsExternalRequest(RequestModel):
    """Save the model's weights for use elsewhere (tinker SDK ≥ 0.30): the adapter and the base
    model with the adapter merged in, as ``tinker://<model_id>/external_weights/<path>``."""

    model_id: Id
    """The model to save."""

    path: CheckpointName
    """Checkpoint name (required)."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""

    ttl_seconds: TtlSeconds | None = None
    """Seconds until the checkpoint expires; None keeps it."""

    age_encryption_recipients: Annotated[list[ShortText], Field(max_length=64)] | None = None
    """age recipients to encrypt the files to (not offered: files are sealed with the
    account's KMS key and downloaded by time-limited links)."""

    type: Literal["save_weights_external"] = "save_weights_external"
    """Request kind tag."""


class LoadWeightsRequest(RequestModel):
    """Load a training checkpoint into a model (or create the model from it)."""

    model_id: Id | None = None
    """The model to load into; set with seq_id, and not with session_id."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""

    session_id: Id | None = None
    """Client session of a model created by this load; set with model_seq_id."""

    model_seq_id: Counter | None = None
    """Counter of models within the client session, for a model created by this load."""

    base_model: BaseModelName | None = None
    """Base model override for a model created by this load."""

    user_metadata: Metadata | None = None
    """Free-form metadata of the training run, set by the user."""

    path: TinkerPath
    """tinker:// path of the training checkpoint, or the ARN of a model package version."""

    optimizer: bool
    """Whether to restore the optimizer state too."""

    optimizer_config: OptimizerConfig | None = None
    """The optimizer family of a model created by this load without its optimizer state (None:
    AdamW); with the state, the checkpoint's family, which this may only repeat."""

    weights_access_token: Annotated[str, Field(max_length=4096)] | None = None
    """Access token for a checkpoint owned by another account."""

    type: Literal["load_weights"] = "load_weights"
    """Request kind tag."""


class LoadWeightsResponse(ResponseModel):
    """Confirms a load."""

    path: str | None = None
    """tinker:// path that was loaded."""

    model_id: str | None = None
    """The model the weights were loaded into."""

    type: Literal["load_weights"] | None = None
    """Response kind tag."""


class WeightsInfoRequest(RequestModel):
    """Ask what a checkpoint was trained from."""

    tinker_path: TinkerPath
    """tinker:// path of the checkpoint, or the ARN of a model package version."""


class WeightsInfoResponse(ResponseModel):
    """What a checkpoint needs to be loaded."""

    base_model: str
    """Base model of the checkpoint."""

    is_lora: bool
    """Whether the checkpoint is a LoRA adapter."""

    lora_rank: int | None = None
    """The adapter's rank, if a LoRA."""

    train_unembed: bool | None = None
    """Whether the unembedding layer has an adapter."""

    train_mlp: bool | None = None
    """Whether the MLP layers have adapters."""

    train_attn: bool | None = None
    """Whether the attention layers have adapters."""

    train_projector: bool | None = None
    """Whether a vision-language model's projector has adapters (Loopwright)."""

    optimizer: str | None = None
    """The optimizer family of the model it was saved from, ``adamw`` or ``dimuon``
    (Loopwright); its optimizer state loads only into a model of that family."""


class CopyWeightsRequest(RequestModel):
    """Copy a checkpoint inside the account: into a session's model slot, or the account's
    project (``default``). The copy is a training run of its own that cannot be trained on."""

    source_path: TinkerPath
    """The checkpoint to copy: a tinker path of either kind, or a model package version ARN."""

    session_id: Id | None = None
    """The session that owns the copy (with model_seq_id)."""

    model_seq_id: Counter | None = None
    """The copy's model slot in that session, as create_model and load_weights use."""

    destination_project_id: Annotated[str, Field(max_length=128)] | None = None
    """The project that owns the copy when no session_id is given: ``default``."""

    ttl_seconds: TtlSeconds | None = None
    """Seconds until the copy expires (1 hour to 10 years); the source's expiry is not kept."""

    weights_access_token: Annotated[str, Field(max_length=4096)] | None = None
    """Copies across accounts are not offered: refused when given."""


class CopyWeightsResponse(ResponseModel):
    tinker_path: str
    """The copy's path."""
