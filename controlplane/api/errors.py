"""One error shape for every HTTP error: ``{"detail", "code", "field"}``."""

from __future__ import annotations

from pydantic import ValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from controlplane.errors import DomainError, Throttled


def error_response(http_status: int, detail: str, code: str, field: str | None = None) -> Response:
    return Response({"detail": detail, "code": code, "field": field}, status=http_status)


def field_path(loc) -> str:
    """A pydantic location as people write it: ``vpc_config.subnets[2]``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def validation_response(exc: ValidationError) -> Response:
    first = exc.errors()[0]
    field = field_path(first.get("loc", ())) or None
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return error_response(
        400, f"{field}: {message}{more}" if field else message + more, "invalid_request", field
    )


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        response = error_response(exc.status, exc.detail, exc.code, exc.field)
        if isinstance(exc, Throttled):
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, ValidationError):
        return validation_response(exc)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return error_response(401, str(exc.detail), "unauthenticated")
    response = drf_handler(exc, context)
    if response is not None:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = getattr(exc, "default_code", "error")
        if isinstance(detail, dict | list):
            detail = str(detail)
        response.data = {"detail": str(detail), "code": code, "field": None}
        if response.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
            response.data["code"] = "method_not_allowed"
    return response
