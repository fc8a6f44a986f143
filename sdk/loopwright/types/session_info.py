"""Loopwright's view of a session: its state, what it holds, and the error body of HTTP errors."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from ._base import ResponseModel
from .queue import QueueStatus

__all__ = ["ErrorBody", "ListSessionInfosResponse", "SessionInfo", "SessionState"]

SessionState = Literal["pending", "active", "stopping", "stopped", "failed", "expired"]


class SessionInfo(ResponseModel):
    """A session and the models and samplers it holds."""

    session_id: str
    """The session's id."""

    name: str | None = None
    """Its human-readable name."""

    state: SessionState
    """Lifecycle state; only pending and active sessions count against the quota."""

    created_at: datetime
    """When it was created."""

    last_heartbeat_at: datetime | None = None
    """When the client last sent a heartbeat."""

    model_ids: list[str] = Field(default_factory=list)
    """Training models created in it."""

    sampling_session_ids: list[str] = Field(default_factory=list)
    """Sampling sessions opened in it."""

    tags: list[str] = Field(default_factory=list)
    """Free-form labels."""

    user_metadata: dict[str, Any] | None = None
    """Free-form metadata set by the user."""

    placement: str | None = None
    """Where its models run: "placed", or why one waits for a worker ("waiting_for_worker",
    "waiting_for_capacity", "waiting_for_network"); None before it has a model."""

    status_reason: str | None = None
    """Why a model of the session waits, for people; empty when none waits."""

    queue: QueueStatus | None = None
    """Where the session's first waiting model (else sampler) stands in the placement queue;
    None when nothing of it waits."""


class ListSessionInfosResponse(ResponseModel):
    """The caller's sessions, newest first."""

    sessions: list[SessionInfo]
    """The sessions."""


class ErrorBody(ResponseModel):
    """The JSON body of an HTTP error answer."""

    detail: str
    """What went wrong, for people."""

    code: str | None = None
    """A stable machine-readable error code, e.g. "seq_id_conflict"."""

    field: str | None = None
    """The request field at fault, if one is."""
