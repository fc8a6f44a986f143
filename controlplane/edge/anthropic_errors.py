"""Anthropic's error shape, ``{"type": "error", "error": {"type", "message"}}``, with the
statuses and types its clients map to their exceptions: the Messages face's DRF exception
handler, and the body of a stream's last ``error`` event. The message names the field."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from rest_framework import exceptions
from rest_framework.response import Response

from controlplane.errors import MAX_DETAIL, DomainError, shortened
from controlplane.training_sessions.errors import Unavailable

log = logging.getLogger(__name__)

OVERLOADED = 529  # Anthropic's status for "no capacity now, retry"
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    OVERLOADED: "overloaded_error",
}


def error_body(status: int, message: str) -> dict:
    """The body Anthropic's shape gives a refusal of ``status``; the message is cut short."""
    kind = TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": shortened(message, MAX_DETAIL)}}


def anthropic_error_of(exc: DomainError) -> tuple[int, dict]:
    """The status and body of ``exc``, its message led by the field it is about; no worker to
    take it now is Anthropic's 529."""
    status = OVERLOADED if isinstance(exc, Unavailable) else exc.status
    message, field = exc.detail, exc.field
    if field and not message.startswith((f"{field}:", f"{field} ")):
        message = f"{field}: {message}"
    return status, error_body(status, message)


_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}  # pydantic's union member tags


def dotted(loc) -> str:
    """A pydantic location as Anthropic names fields: ``messages.1.content.0.text`` (the tags
    of union members, ``str`` or ``list[TextBlock]``, left out)."""
    parts = []
    for i, part in enumerate(loc):
        name = str(part)
        tag = not name.isidentifier() or name in _TAGS or name[:1].isupper()
        if isinstance(part, int) or i == 0 or not tag:
            parts.append(name)
    return ".".join(parts)


def _answer(status: int, message: str, retry_after: int | None = None) -> Response:
    response = Response(error_body(status, message), status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def anthropic_exception_handler(exc, context) -> Response:
    """The Messages face's DRF exception handler."""
    if isinstance(exc, DomainError):
        status, body = anthropic_error_of(exc)
        response = Response(body, status=status)
        if getattr(exc, "retry_after", None) is not None:  # throttled, or no worker up now
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, ValidationError):
        # the most specific error: a union's deepest member error says what is wrong inside
        first = max(exc.errors(), key=lambda e: len(e.get("loc", ())))
        field = dotted(first.get("loc", ()))
        message = first.get("msg", "invalid")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return _answer(400, f"{field}: {message}{more}" if field else message + more)
    if isinstance(exc, exceptions.NotAuthenticated):
        return _answer(401, "x-api-key header is required (or Authorization: Bearer <key>)")
    if isinstance(exc, exceptions.AuthenticationFailed):
        return _answer(401, "invalid x-api-key: " + str(exc.detail))
    if isinstance(exc, exceptions.APIException):
        wait = getattr(exc, "wait", None)
        return _answer(exc.status_code, str(exc.detail), int(wait) if wait else None)
    log.exception("unhandled error in %s", context.get("view"))
    return _answer(500, "Internal server error")
