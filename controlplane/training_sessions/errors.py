"""Domain errors of sessions and operations; the API maps each to an HTTP status."""

from __future__ import annotations

from controlplane.errors import Conflict, DomainError, NotFound

__all__ = ["Conflict", "Gone", "NotActive", "NotFound", "Unavailable"]


class NotActive(DomainError):
    """The session (or model) is in a state that takes no more operations."""

    status = 409
    code = "session_not_active"


class Gone(DomainError):
    status = 410
    code = "session_finished"


class Unavailable(DomainError):
    """No live worker can take it now; one may soon (answered with ``Retry-After``)."""

    status = 503
    code = "no_capacity"
    retry_after = 30
