"""The error shape of each face: ``{"detail", "code", "field"}`` under ``/api/``, OpenAI's
``{"error": {"message", "type", "param", "code"}}`` under ``/v1/`` (each with its DRF exception
handler), and a dashboard page's account of a refusal; a path no view answers (a 404, a crash
outside any view, a bad request refused by the middleware) in the shape of the face it is under,
AWS's JSON error shape under the SageMaker planes.
"""

from __future__ import annotations

import logging
import re

from pydantic import ValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from controlplane.access_keys.aws_errors import JSON_1_1, AwsError, aws_error_response
from controlplane.errors import (
    MAX_DETAIL,
    MAX_FIELD,
    AccessDenied,
    BudgetExhausted,
    DomainError,
    QuotaExceeded,
    Throttled,
    Unauthenticated,
    shortened,
)
from controlplane.iam.actions import ACTIONS

from .callers import principal_of

log = logging.getLogger(__name__)

# -- /api/: {"detail", "code", "field"} ------------------------------------------------------


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
    """The ``/api/v1`` face's DRF exception handler."""
    if isinstance(exc, DomainError):
        if exc.status == 409:  # a client's retries and its numbering meet here: say why
            request = context.get("request")
            log.warning("409 on %s: %s", getattr(request, "path", "?"), exc.detail)
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


# -- /v1/: OpenAI's {"error": {"message", "type", "param", "code"}} -------------------------


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    message = shortened(str(message), MAX_DETAIL)
    param = shortened(param, MAX_FIELD) if param else param
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def openai_error_response(
    status: int, message: str, type_: str, param: str | None = None, code: str | None = None
) -> Response:
    return Response(error_body(message, type_, param, code), status=status)


def openai_error_of(exc: DomainError) -> dict:
    """The body OpenAI's shape gives ``exc`` (also sent as an event when a stream fails)."""
    return error_body(exc.detail, _openai_type_of(exc), exc.field, exc.code)


def _openai_type_of(exc: DomainError) -> str:
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


def openai_exception_handler(exc, context) -> Response | None:
    """The OpenAI-compatible ``/v1`` face's DRF exception handler, with the status codes
    OpenAI's clients map to their exception types."""
    if isinstance(exc, DomainError):
        code = "invalid_api_key" if isinstance(exc, Unauthenticated) else exc.code
        response = openai_error_response(
            exc.status, exc.detail, _openai_type_of(exc), exc.field, code
        )
        if getattr(exc, "retry_after", None) is not None:  # throttled, or no worker up now
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        param = validation_param(first.get("loc", ()))
        message = "unknown parameter" if first.get("type") == "extra_forbidden" else first["msg"]
        message = f"{param}: {message}" if param else message
        return openai_error_response(400, message, "invalid_request_error", param, "invalid_value")
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        missing = isinstance(exc, exceptions.NotAuthenticated)
        message = (
            "You didn't provide an API key: send it as `Authorization: Bearer <key>`."
            if missing
            else str(exc.detail)
        )
        response = openai_error_response(
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
        return openai_error_response(status, str(exc.detail), kind, code=exc.default_code)
    log.exception("unhandled error in %s", context.get("view"))
    return openai_error_response(
        500, "The server had an error processing your request.", "server_error"
    )


# -- the dashboard: a refusal in words -------------------------------------------------------

_REFUSED = re.compile(r"not authorized to perform (\S+) on (\S+?):")


def refusal(request, error: DomainError) -> dict:
    """A 403 in words: what the person tried (the action's description), as whom, and who can
    help; the policy evaluator's own reason is kept for those who want it."""
    found = _REFUSED.search(error.detail) if isinstance(error, AccessDenied) else None
    if found is None:
        return {}
    action = found.group(1)
    spec = ACTIONS.get(action)
    return {
        "denied_action": action,
        "denied_what": spec.description if spec else action,
        "denied_resource": found.group(2),
        "membership": getattr(principal_of(request), "membership", None),
    }


# -- a path no view answers ------------------------------------------------------------------


_AWS_CODES = {404: "UnknownOperationException", 500: "InternalFailure"}


def _api_error(request, status: int, detail: str, code: str):
    """``{detail, code, field}`` under /api/, OpenAI's shape under /v1/, AWS's under the
    SageMaker planes; None elsewhere."""
    from django.http import JsonResponse

    path = request.path
    if path == "/sagemaker" or path.startswith(("/sagemaker/", "/sagemaker-runtime")):
        error = AwsError(_AWS_CODES.get(status, "ValidationException"), detail, status=status)
        kind = JSON_1_1 if path == "/sagemaker" else "application/json"
        return aws_error_response(error, content_type=kind)
    if path.startswith("/api/"):
        return JsonResponse({"detail": detail, "code": code, "field": None}, status=status)
    if path.startswith("/v1/"):
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return JsonResponse(error_body(detail, kind, code=code), status=status)
    return None


def api_bad_request(request, detail: str):
    from django.http import HttpResponseBadRequest

    return _api_error(request, 400, detail, "invalid_request") or HttpResponseBadRequest(detail)


def api_too_large(request, detail: str):
    """A body over the size limit, refused unread, in the shape of the face it was sent to."""
    return _api_error(request, 413, detail, "payload_too_large")


def api_not_found(request, exception=None):
    from django.views.defaults import page_not_found

    answer = _api_error(request, 404, "no such route", "not_found")
    return answer or page_not_found(request, exception)


def api_server_error(request):
    from django.views.defaults import server_error

    return _api_error(request, 500, "internal error", "server_error") or server_error(request)
