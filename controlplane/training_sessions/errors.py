"""Domain errors of sessions and operations; the API maps each to an HTTP status."""

from __future__ import annotations


class SessionError(Exception):
    status = 400
    code = "invalid_request"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class NotFound(SessionError):
    """Missing, or another tenant's: the answer is the same."""

    status = 404
    code = "not_found"


class Conflict(SessionError):
    status = 409
    code = "conflict"


class NotActive(SessionError):
    """The session (or model) is in a state that takes no more operations."""

    status = 409
    code = "session_not_active"


class Gone(SessionError):
    status = 410
    code = "session_finished"


class Unavailable(SessionError):
    status = 503
    code = "no_capacity"
