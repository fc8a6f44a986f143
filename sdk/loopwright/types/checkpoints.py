"""Checkpoints: saved weights of a training run, their tinker:// paths and their listing."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from ._base import ResponseModel
from .pagination import Cursor

__all__ = ["Checkpoint", "CheckpointType", "CheckpointsListResponse", "ParsedCheckpointTinkerPath"]

CheckpointType = Literal["training", "sampler"]

_KIND_BY_SEGMENT: dict[str, CheckpointType] = {"weights": "training", "sampler_weights": "sampler"}


class Checkpoint(ResponseModel):
    """One saved checkpoint."""

    checkpoint_id: str
    """Id within its run, e.g. "weights/step-100" or "sampler_weights/step-100"."""

    checkpoint_type: CheckpointType
    """Training state ("training") or sampler weights ("sampler")."""

    time: datetime
    """When it was saved."""

    tinker_path: str
    """Its tinker:// path."""

    size_bytes: int | None = None
    """Size in bytes, if known."""

    public: bool = False
    """Whether anyone may load it."""

    expires_at: datetime | None = None
    """When it expires; None means never."""

    base_model: str | None = None
    """The base model its adapter belongs to (tinker 0.39)."""


class CheckpointsListResponse(ResponseModel):
    """A page of checkpoints."""

    checkpoints: list[Checkpoint]
    """The checkpoints."""

    cursor: Cursor | None = None
    """Page position; None for an unpaginated list."""


class ParsedCheckpointTinkerPath(ResponseModel):
    """A tinker://<run_id>/<weights|sampler_weights>/<name> path, split into its parts."""

    tinker_path: str
    """The whole path."""

    training_run_id: str
    """The run (model id) that saved it."""

    checkpoint_type: CheckpointType
    """Training state or sampler weights."""

    checkpoint_id: str
    """Kind segment and name, e.g. "weights/step-100"."""

    @classmethod
    def from_tinker_path(cls, tinker_path: str) -> ParsedCheckpointTinkerPath:
        """Split a checkpoint path; raises ValueError if it is not one."""
        prefix = "tinker://"
        parts = tinker_path.removeprefix(prefix).split("/")
        valid = tinker_path.startswith(prefix) and len(parts) == 3 and all(parts)
        if not valid or parts[1] not in _KIND_BY_SEGMENT:
            raise ValueError(f"not a tinker checkpoint path: {tinker_path!r}")
        return cls(
            tinker_path=tinker_path,
            training_run_id=parts[0],
            checkpoint_type=_KIND_BY_SEGMENT[parts[1]],
            checkpoint_id=f"{parts[1]}/{parts[2]}",
        )
