"""AWS's JSON error shape, which botocore parses on both SageMaker planes: a body
``{"__type": <code>, "message": <text>}`` with the ``x-amzn-ErrorType`` header, and the AWS
error a domain error becomes (the service models' names: ``ValidationException``,
``ResourceNotFound``, ``ConflictException``, ``ThrottlingException``, …)."""

from __future__ import annotations

import json
import uuid

from django.http import HttpResponse

from controlplane.errors import (
    MAX_DETAIL,
    AccessDenied,
    BudgetExhausted,
    Conflict,
    DomainError,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    Throttled,
    Unauthenticated,
    shortened,
)

JSON_1_1 = "application/x-amz-json-1.1"


class AwsError(Exception):
    """An answer in AWS's error shape: ``code`` is the exception's name in the service model."""

    def __init__(
        self, code: str, message: str, *, status: int = 400, retry_after: int | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after


def aws_error_response(error: AwsError, *, content_type: str = JSON_1_1) -> HttpResponse:
    """The HTTP answer for ``error`` (never a 5xx unless the error is the service's own)."""
    body = {"__type": error.code, "message": shortened(error.message, MAX_DETAIL)}
    response = HttpResponse(json.dumps(body), status=error.status, content_type=content_type)
    response["x-amzn-ErrorType"] = error.code
    response["x-amzn-RequestId"] = str(uuid.uuid4())
    if error.retry_after is not None:
        response["Retry-After"] = str(error.retry_after)
    return response


def aws_error_of(exc: DomainError, *, not_found: str = "ResourceNotFound") -> AwsError:
    """The AWS error a domain error is answered with. ``not_found``: the model's name for a
    missing resource on this plane (``ResourceNotFound`` on SageMaker's control plane)."""
    detail = exc.detail
    retry = getattr(exc, "retry_after", None)
    if isinstance(exc, NotFound):
        return AwsError(not_found, detail, status=400)
    if isinstance(exc, AccessDenied):
        return AwsError("AccessDeniedException", detail, status=400)
    if isinstance(exc, Throttled):
        return AwsError("ThrottlingException", detail, status=400, retry_after=retry)
    if isinstance(exc, QuotaExceeded | BudgetExhausted):
        return AwsError("ResourceLimitExceeded", detail, status=400)
    if isinstance(exc, Conflict):
        return AwsError("ConflictException", detail, status=400)
    if isinstance(exc, Unauthenticated):
        return AwsError("UnrecognizedClientException", detail, status=403)
    if isinstance(exc, PayloadTooLarge):
        return AwsError("ValidationException", detail, status=413)
    if exc.status >= 500:  # the service could not do it now (no worker up): retried by botocore
        return AwsError("ServiceUnavailable", detail, status=503, retry_after=retry)
    return AwsError("ValidationException", detail, status=400)
