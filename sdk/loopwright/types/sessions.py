"""Client sessions: opening one, keeping it alive, and listing what it holds."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._base import RequestModel, ResponseModel
from .limits import MAX_TAGS, Arn, ContextLength, Id, Metadata, ShortText, Tag
from .vpc import VpcConfig

__all__ = [
    "CreateSessionRequest",
    "CreateSessionResponse",
    "GetSessionResponse",
    "ListSessionsResponse",
    "SessionHeartbeatRequest",
    "SessionHeartbeatResponse",
]


class CreateSessionRequest(RequestModel):
    """Open a client session, the parent of its training models and samplers."""

    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)]
    """Free-form labels: at most 64, each at most 256 characters."""

    user_metadata: Metadata | None = None
    """Free-form metadata set by the user (omitted from the body when None)."""

    sdk_version: Annotated[str, Field(max_length=64)]
    """Version of the SDK that opens the session."""

    project_id: Annotated[str, Field(max_length=128)] | None = None
    """Project to file the session under."""

    display_name: ShortText | None = None
    """A name to show for the session (tinker SDK ≥ 0.30); the session's name when ``name`` is
    not given."""

    name: ShortText | None = None
    """Human-readable session name (Loopwright extension)."""

    role_arn: Arn | None = None
    """IAM role the session runs as; the caller needs iam:PassRole on it (Loopwright extension)."""

    model_package_group_arn: Arn | None = None
    """Model package group that registers every checkpoint as a version (Loopwright extension)."""

    s3_output_path: Annotated[str, Field(max_length=1024)] | None = None
    """Where checkpoints are written, e.g. s3://bucket/prefix (Loopwright extension)."""

    kms_key_arn: Arn | None = None
    """KMS key that encrypts the session's checkpoints (Loopwright extension)."""

    vpc_config: VpcConfig | None = None
    """Where the session's work runs: {"subnets": [...], "security_group_ids": [...]} (Loopwright
    extension)."""

    context_length: ContextLength | None = None
    """The context, in tokens, of the session's models and samplers that ask for none of their
    own, at most each one's base model's maximum (Loopwright extension)."""

    type: Literal["create_session"] = "create_session"
    """Request kind tag."""


class CreateSessionResponse(ResponseModel):
    """The opened session."""

    type: Literal["create_session"] = "create_session"
    """Response kind tag."""

    info_message: str | None = None
    """A notice for the user, logged at info level."""

    warning_message: str | None = None
    """A notice for the user, logged as a warning."""

    error_message: str | None = None
    """A notice for the user, logged as an error."""

    session_id: str
    """Id of the new session."""


class SessionHeartbeatRequest(RequestModel):
    """Keep a session alive (the SDK sends one every 10 seconds)."""

    session_id: Id
    """The session to keep alive."""

    type: Literal["session_heartbeat"] = "session_heartbeat"
    """Request kind tag."""


class SessionHeartbeatResponse(ResponseModel):
    """Acknowledges a heartbeat."""

    type: Literal["session_heartbeat"] = "session_heartbeat"
    """Response kind tag."""


class GetSessionResponse(ResponseModel):
    """What a session holds."""

    training_run_ids: list[str]
    """Model ids of the session's training runs."""

    sampler_ids: list[str]
    """Ids of the session's samplers."""


class ListSessionsResponse(ResponseModel):
    """The caller's sessions."""

    sessions: list[str]
    """Session ids."""
