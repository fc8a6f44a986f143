"""One error shape for every HTTP error: ``{"detail", "code", "field"}``."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from controlplane.errors import MAX_DETAIL, MAX_FIELD, DomainError, shortened

log = logging.getLogger(__name__)


def error_response(http_status: int, detail: str, code: str, field: str | None = None) -> Response:
    """The error body, short whatever the input was: the detail and the field are cut to
    ``MAX_DETAIL`` and ``MAX_FIELD`` characters."""
    body = {
        "detail": shortened(str(detail), MAX_DETAIL),
        "code": code,
        "field": shortened(field, MAX_FIELD) if field else field,
    }
    return Response(body, status=http_status)


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
        if getattr(exc, "retry_after", None) is not None:  # throttled, or no worker up now
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
        response.data = {"detail": shortened(str(detail), MAX_DETAIL), "code": code, "field": None}
        if response.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
            response.data["code"] = "method_not_allowed"
        return response
    # anything else is a bug: logged, and answered in the same shape (never an HTML page)
    log.exception("unhandled error in %s", context.get("view"))
    return error_response(500, "internal error", "server_error")


def _api_error(request, status: int, detail: str, code: str):
    """``{detail, code, field}`` under /api/, OpenAI's shape under /v1/; None elsewhere."""
    from django.http import JsonResponse

    from controlplane.openai_api.errors import error_body

    path = request.path
    if path.startswith("/api/"):
        return JsonResponse({"detail": detail, "code": code, "field": None}, status=status)
    if path.startswith("/v1/"):
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return JsonResponse(error_body(detail, kind, code=code), status=status)
    return None


def api_bad_request(request, detail: str):
    from django.http import HttpResponseBadRequest

    return _api_error(request, 400, detail, "invalid_request") or HttpResponseBadRequest(detail)


def api_not_found(request, exception=None):
    from django.views.defaults import page_not_found

    answer = _api_error(request, 404, "no such route", "not_found")
    return answer or page_not_found(request, exception)


def api_server_error(request):
    from django.views.defaults import server_error

    return _api_error(request, 500, "internal error", "server_error") or server_error(request)
