"""The SDK's exceptions: a ladder keyed to HTTP status, plus failures reported by futures.

Catch ``APIStatusError`` for any HTTP error answer, ``APIConnectionError`` for no answer at all.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "GoneError",
    "InternalServerError",
    "LoopwrightError",
    "ModelLostError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PaymentRequiredError",
    "PermissionDeniedError",
    "QueueTimeoutError",
    "RateLimitError",
    "RequestFailedError",
    "UnprocessableEntityError",
    "status_error",
]


class LoopwrightError(Exception):
    """Base of every exception the SDK raises on purpose (bad configuration, closed client)."""


class QueueTimeoutError(LoopwrightError, TimeoutError):
    """A create waited in the server's placement queue past the limit the caller set
    (``queue_timeout``); it has left the queue (its session was stopped). ``status`` is its last
    known place (a ``QueueStatus``: position, what it waited for, likely start), or None."""

    def __init__(self, message: str, status: Any = None) -> None:
        super().__init__(message)
        self.status = status


class APIError(LoopwrightError):
    """Something went wrong talking to the server."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class APIConnectionError(APIError):
    """No usable answer: the connection failed or broke, after all retries."""


class APITimeoutError(APIConnectionError):
    """The server did not answer in time, after all retries."""


class APIResponseValidationError(APIError):
    """The server answered with a body that does not match the expected type."""


class APIStatusError(APIError):
    """The server answered with an HTTP error status (4xx or 5xx)."""

    status_code: int = 0

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        body: Any = None,
        detail: str | None = None,
        field: str | None = None,
        code: str | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.detail = detail
        self.field = field
        self.code = code
        self.response = response


class BadRequestError(APIStatusError):
    """400: the request is malformed or invalid."""


class AuthenticationError(APIStatusError):
    """401: the API key is missing, unknown or revoked."""


class PaymentRequiredError(APIStatusError):
    """402: a hard budget the request counts against is used up (``code`` "budget_exhausted"):
    the account's monthly token budget, or one of its budgets (of the account, the key, the
    session or a tag); the detail names it and says when it resets. Not retried."""


class PermissionDeniedError(APIStatusError):
    """403: the key's principal may not do this (an IAM policy denies it)."""


class NotFoundError(APIStatusError):
    """404: no such object, or it belongs to another tenant."""


class ConflictError(APIStatusError):
    """409: conflicts with the current state, e.g. a seq_id reused with another body."""


class GoneError(APIStatusError):
    """410: the session or future is finished and no longer accepts calls."""


class PayloadTooLargeError(APIStatusError):
    """413: the request body is too large."""


class UnprocessableEntityError(APIStatusError):
    """422: the body is well-formed but fails validation."""


class RateLimitError(APIStatusError):
    """429: too many requests or over quota (retried first, honouring Retry-After)."""


class InternalServerError(APIStatusError):
    """5xx: the server failed (retried first)."""


class RequestFailedError(APIError):
    """An operation was accepted but failed on the server.

    ``category`` is "user" when the request itself was at fault (fix it; retrying will not help),
    "server" when the service failed, "unknown" otherwise.
    """

    def __init__(self, message: str, category: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.category = category
        self.request_id = request_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.category, self.request_id))


class ModelLostError(RequestFailedError):
    """The model could not be brought back after the worker holding it was lost (its recovery
    point or a checkpoint it loaded is gone, or a replay gave other results): the model has
    failed. ``resume_from`` is its newest state save (``tinker://…/weights/…``), to resume with
    ``create_training_client_from_state_with_optimizer``; None if it has none."""

    def __init__(
        self,
        message: str,
        category: str,
        request_id: str | None = None,
        resume_from: str | None = None,
    ) -> None:
        super().__init__(message, category, request_id)
        self.resume_from = resume_from

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.category, self.request_id, self.resume_from))


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    402: PaymentRequiredError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(response: httpx.Response) -> APIStatusError:
    """The exception for an HTTP error answer, with the ErrorBody fields read from its JSON."""
    status = response.status_code
    cls = InternalServerError if status >= 500 else _BY_STATUS.get(status, APIStatusError)
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    detail = field = code = None
    if isinstance(body, dict):
        detail = body.get("detail") if isinstance(body.get("detail"), str) else None
        field = body.get("field") if isinstance(body.get("field"), str) else None
        code = body.get("code") if isinstance(body.get("code"), str) else None
    if detail is None and body:
        detail = str(body)[:500]
    where = f" ({field})" if field else ""
    message = f"{status} {response.reason_phrase}: {detail or 'no detail'}{where}"
    return cls(
        message,
        status_code=status,
        body=body,
        detail=detail,
        field=field,
        code=code,
        response=response,
    )
