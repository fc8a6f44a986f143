"""The body of ``sessions/search`` (tinker SDK 0.38's ``SessionSearchRequest``), validated with
the same limits the SDK puts on it; an unknown field or a value out of range is a 400."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

__all__ = ["SessionSearchQuery"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StatusQuery(_Strict):
    """One status to match; ``reasons`` narrows ``client_finished``."""

    type: Literal["active", "cancelled", "failed", "client_finished"]
    reasons: list[Literal["success", "errored", "interrupted"]] | None = Field(None, min_length=1)


class Owner(_Strict):
    """Whose sessions: ``own`` or ``accessible`` (the same here: the account's)."""

    type: Literal["own", "accessible"] = "own"


class Cursor(_Strict):
    """Where the next page starts (a previous answer's ``next_cursor``)."""

    last_created_at: AwareDatetime
    last_session_id: str = Field(max_length=64)


class SessionSearchQuery(_Strict):
    """Filters of a session search; every one given must hold."""

    session_id: str | None = Field(None, max_length=64)
    project_ids: list[str] | None = Field(None, max_length=100)
    user_metadata: dict[str, str] = Field(default_factory=dict, max_length=50)
    display_name: str | None = Field(None, min_length=1, max_length=200)
    owner: Owner = Owner()
    statuses: list[StatusQuery] | None = Field(None, min_length=1, max_length=10)
    limit: int = Field(50, ge=1, le=200)
    cursor: Cursor | None = None
