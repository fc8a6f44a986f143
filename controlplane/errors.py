"""Domain errors shared by every app; the API maps each to an HTTP status and ``{detail, code,
field}``."""

from __future__ import annotations

MAX_DETAIL = (
    1000  # characters of an error's detail; longer ones are cut (an input never echoes whole)
)
MAX_FIELD = 200


def shortened(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with an ellipsis when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: object, limit: int = 80) -> str:
    """``value`` as an error message quotes it (``repr``), at most ``limit`` characters."""
    return shortened(repr(value), limit)


class DomainError(Exception):
    status = 400
    code = "invalid_request"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class Unreadable(DomainError):
    """A request body that is not what the request is read from (not a JSON object): answered
    as a body that does not parse."""

    code = "parse_error"


class NotFound(DomainError):
    """Missing, or another tenant's: the answer is the same."""

    status = 404
    code = "not_found"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class AccessDenied(DomainError):
    """An IAM decision said no; the detail names the action and the resource."""

    status = 403
    code = "access_denied"


class Throttled(DomainError):
    status = 429
    code = "throttled"

    def __init__(self, detail: str, *, retry_after: int, field: str | None = None) -> None:
        super().__init__(detail, field=field)
        self.retry_after = retry_after


class Unauthenticated(DomainError):
    status = 401
    code = "unauthenticated"


class QuotaExceeded(DomainError):
    """A tenant's quota is used up; the detail names the limit, the usage and how to free some."""

    status = 429
    code = "quota_exceeded"


class RequestOverQuota(QuotaExceeded):
    """A request asks for more than a per-request quota allows (a model's ``replicas`` above
    ``max_replicas``): the same code, but a 400, since sending it again never passes (a 429 is
    retried by the SDKs for minutes)."""

    status = 400


class BudgetExhausted(DomainError):
    """A tenant's tokens this month reached its budget; the detail names the budget, the usage
    and when it resets."""

    status = 402
    code = "budget_exhausted"


class PayloadTooLarge(DomainError):
    """A request body (or what it decompresses to) is over the size limit, which it names."""

    status = 413
    code = "payload_too_large"
