"""The runtime's errors in AWS's shape (``controlplane.access_keys.aws_errors``: the status,
``x-amzn-ErrorType`` and a body ``{"__type", "message"}``) with the runtime model's exception
names and statuses, which botocore raises as ``client.exceptions.<Name>``. Missing and another
account's are the same ``ResourceNotFoundException``; a SigV4 refusal carries its own code; a
5xx is only ever a bug."""

from __future__ import annotations

import logging

from django.http import HttpResponse
from pydantic import ValidationError
from rest_framework import exceptions

from controlplane.access_keys.authentication import SigV4Failed
from controlplane.access_keys.aws_errors import AwsError, aws_error_response
from controlplane.edge.errors import field_path
from controlplane.errors import AccessDenied, DomainError, RequestOverQuota, shortened

log = logging.getLogger(__name__)

VALIDATION = "ValidationException"
NOT_FOUND = "ResourceNotFoundException"
CONFLICT = "ConflictException"
THROTTLING = "ThrottlingException"
INTERNAL = "InternalServerException"
ACCESS_DENIED = "AccessDeniedException"
UNKNOWN_OPERATION = "UnknownOperationException"
# the model's exceptions (and AWS's common access error) by HTTP status
NAMES = {
    400: VALIDATION,
    403: ACCESS_DENIED,
    404: NOT_FOUND,
    409: CONFLICT,
    429: THROTTLING,
    500: INTERNAL,
}


def aws_error(status: int, name: str, message: str, retry_after: int | None = None) -> HttpResponse:
    error = AwsError(name, str(message), status=status, retry_after=retry_after)
    return aws_error_response(error, content_type="application/json")


def status_of(exc: DomainError) -> int:
    """The model's status for a domain error: every refusal of the request is a 400 (a quota a
    request exceeds, a budget, a body too large), a session or operation in the wrong state or
    a number already used a 409, a wait the client should retry a 429 (no worker live now)."""
    if isinstance(exc, AccessDenied):
        return 403
    if isinstance(exc, RequestOverQuota):
        return 400
    if exc.status in (404, 409, 429):
        return exc.status
    if exc.status == 410:
        return 409
    if exc.status == 503 or getattr(exc, "retry_after", None) is not None:
        return 429
    if exc.status >= 500:
        return 500
    return 400


def domain_error(exc: DomainError) -> HttpResponse:
    status = status_of(exc)
    if status == 500:
        log.error("sagemaker runtime: %s", exc.detail)
    return aws_error(status, NAMES[status], _in_our_words(exc), getattr(exc, "retry_after", None))


# the services' names of what this face calls by the model's names
MEMBERS = {"seq_id": "sequenceNumber", "path": "modelPackageArn", "model_path": "modelPackageArn"}


def _in_our_words(exc: DomainError) -> str:
    detail, member = exc.detail, MEMBERS.get(exc.field or "")
    if member is None:
        return detail
    if exc.field == "seq_id":
        return detail.replace("seq_id", member)
    if detail.startswith(f"{exc.field}:"):
        return member + detail[len(exc.field or "") :]
    return detail


def validation_error(exc: ValidationError) -> HttpResponse:
    first = exc.errors()[0]
    where = field_path(first.get("loc", ()))
    message = "unknown member" if first.get("type") == "extra_forbidden" else first.get("msg")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return aws_error(400, VALIDATION, f"{where}: {message}{more}" if where else f"{message}{more}")


def exception_handler(exc, context) -> HttpResponse:
    """The runtime views' DRF exception handler."""
    if isinstance(exc, DomainError):
        return domain_error(exc)
    if isinstance(exc, ValidationError):
        return validation_error(exc)
    if isinstance(exc, SigV4Failed):  # a SigV4 refusal names its own
        return aws_error_response(exc.error, content_type="application/json")
    if isinstance(exc, exceptions.APIException):
        status = exc.status_code
        name = NAMES.get(status) or (VALIDATION if status < 500 else INTERNAL)
        if isinstance(exc, exceptions.Throttled):
            return aws_error(429, THROTTLING, str(exc.detail), int(exc.wait or 1))
        if isinstance(exc, exceptions.ParseError):
            name, status = VALIDATION, 400
        if isinstance(exc, exceptions.MethodNotAllowed):
            name = UNKNOWN_OPERATION
        return aws_error(status, name, str(exc.detail))
    log.exception("unhandled error in %s", context.get("view"))
    return aws_error(500, INTERNAL, "internal error")


def unknown_operation(request) -> HttpResponse:
    """A path or method under ``/sagemaker-runtime`` that is no operation of the service."""
    return aws_error(
        404,
        UNKNOWN_OPERATION,
        f"no operation {request.method} {shortened(request.path, 200)} in this service",
    )
