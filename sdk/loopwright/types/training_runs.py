"""Training runs: one per training model, with its latest checkpoints, and their listing."""

from __future__ import annotations

from datetime import datetime

from ._base import ResponseModel
from .checkpoints import Checkpoint
from .pagination import Cursor

__all__ = ["TrainingRun", "TrainingRunsResponse"]


class TrainingRun(ResponseModel):
    """A training model's run."""

    training_run_id: str
    """The run's id (the model id)."""

    base_model: str
    """The base model it fine-tunes."""

    model_owner: str
    """Who created it."""

    is_lora: bool
    """Whether it trains a LoRA adapter."""

    corrupted: bool = False
    """Whether its state is corrupted."""

    lora_rank: int | None = None
    """The adapter's rank, if a LoRA."""

    last_request_time: datetime
    """When it last received a request."""

    last_checkpoint: Checkpoint | None = None
    """Its latest training checkpoint."""

    last_sampler_checkpoint: Checkpoint | None = None
    """Its latest sampler checkpoint."""

    user_metadata: dict[str, str] | None = None
    """Free-form metadata set by the user."""


class TrainingRunsResponse(ResponseModel):
    """A page of training runs."""

    training_runs: list[TrainingRun]
    """The runs."""

    cursor: Cursor
    """Page position."""
