"""OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``, for every failure
of these endpoints, with the status codes OpenAI's clients map to their exception types."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from rest_framework import exceptions
from rest_framework.response import Response

from controlplane.errors import (
    MAX_DETAIL,
    MAX_FIELD,
    AccessDenied,
    BudgetExhausted,
    DomainError,
    NotFound,
    QuotaExceeded,
    Throttled,
    Unauthenticated,
    shortened,
)

log = logging.getLogger(__name__)


class ModelNotFound(NotFound):
    """The model name is not one of the caller's (missing and another tenant's read the same)."""

    code = "model_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The model `{name}` does not exist or you do not have access to it.", field="model"
        )


class Timeout(DomainError):
    """The sample operation did not finish in time; it still runs (and is metered)."""

    status = 504
    code = "timeout"


class OperationFailed(DomainError):
    """The worker refused or failed the sample operation; ``category`` is the operation's."""

    def __init__(self, detail: str, *, category: str) -> None:
        super().__init__(detail)
        self.status = 400 if category == "user" else 500
        self.code = "invalid_request" if category == "user" else "server_error"


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    message = shortened(str(message), MAX_DETAIL)
    param = shortened(param, MAX_FIELD) if param else param
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    status: int, message: str, type_: str, param: str | None = None, code: str | None = None
) -> Response:
    return Response(error_body(message, type_, param, code), status=status)


def _type_of(exc: DomainError) -> str:
    if isinstance(exc, Throttled):
        return "requests"
    if isinstance(exc, QuotaExceeded | BudgetExhausted):
        return "insufficient_quota"
    if isinstance(exc, AccessDenied):
        return "permission_error"
    if exc.status >= 500:
        return "server_error"
    return "invalid_request_error"


def validation_param(loc) -> str | None:
    """A pydantic location as OpenAI names params: ``messages[1].role`` (union tags left out)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif str(part).isidentifier():
            path += f".{part}" if path else str(part)
    return path or None


def exception_handler(exc, context) -> Response | None:
    if isinstance(exc, DomainError):
        code = "invalid_api_key" if isinstance(exc, Unauthenticated) else exc.code
        response = error_response(exc.status, exc.detail, _type_of(exc), exc.field, code)
        if getattr(exc, "retry_after", None) is not None:  # throttled, or no worker up now
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        param = validation_param(first.get("loc", ()))
        message = "unknown parameter" if first.get("type") == "extra_forbidden" else first["msg"]
        message = f"{param}: {message}" if param else message
        return error_response(400, message, "invalid_request_error", param, "invalid_value")
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        missing = isinstance(exc, exceptions.NotAuthenticated)
        message = (
            "You didn't provide an API key: send it as `Authorization: Bearer <key>`."
            if missing
            else str(exc.detail)
        )
        response = error_response(
            401,
            message,
            "invalid_request_error",
            code="missing_api_key" if missing else "invalid_api_key",
        )
        if getattr(exc, "auth_header", None):
            response["WWW-Authenticate"] = exc.auth_header
        return response
    if isinstance(exc, exceptions.APIException):
        status = exc.status_code
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return error_response(status, str(exc.detail), kind, code=exc.default_code)
    log.exception("unhandled error in %s", context.get("view"))
    return error_response(500, "The server had an error processing your request.", "server_error")
