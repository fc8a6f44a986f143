"""``<base>/sagemaker``: one URL, the operation in ``X-Amz-Target: SageMaker.<Op>``, AWS JSON
1.1 both ways. Each request is authenticated (SigV4, ``X-Amz-Target`` signed), checked against
botocore's model of the operation's input, rate-limited as the account's other calls, handed to
the operation, and its answer rendered and checked against the output shape. Every refusal is
AWS's JSON error shape with the service model's names; nothing a caller sends makes a 5xx."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from urllib.parse import parse_qsl

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from controlplane.access_keys.authentication import caller_of
from controlplane.access_keys.aws_errors import JSON_1_1, AwsError, aws_error_response
from controlplane.audit.outcomes import note_failure
from controlplane.errors import DomainError
from controlplane.quotas.ratelimit import request_rate_check
from controlplane.sagemaker_sessions.shapes import (
    ShapeError,
    checked_input,
    operation_model,
    rendered_output,
)

from . import hub, model_packages, training_sessions
from .calls import Call, answered, validation

log = logging.getLogger(__name__)

SERVICE = "sagemaker"
TARGET_PREFIX = "SageMaker."
MISSING_IS_INVALID = {
    # SageMaker says a missing model package (group) is a ValidationException ("does not exist")
    "DescribeModelPackageGroup",
    "ListModelPackages",
    "DescribeModelPackage",
    "UpdateModelPackage",
    "DeleteModelPackage",
}

Handler = Callable[[Call, dict], dict]
OPERATIONS: dict[str, Handler] = {
    "CreateTrainingSession": training_sessions.create_training_session,
    "DescribeTrainingSession": training_sessions.describe_training_session,
    "ListTrainingSessions": training_sessions.list_training_sessions,
    "StopTrainingSession": training_sessions.stop_training_session,
    "DeleteTrainingSession": training_sessions.delete_training_session,
    "CreateModelPackageGroup": model_packages.create_model_package_group,
    "DescribeModelPackageGroup": model_packages.describe_model_package_group,
    "ListModelPackages": model_packages.list_model_packages,
    "DescribeModelPackage": model_packages.describe_model_package,
    "UpdateModelPackage": model_packages.update_model_package,
    "DeleteModelPackage": model_packages.delete_model_package,
    "ListHubContents": hub.list_hub_contents,
    "DescribeHubContent": hub.describe_hub_content,
}


@csrf_exempt
def endpoint(request: HttpRequest) -> HttpResponse:
    name = ""
    try:
        caller = caller_of(request, service=SERVICE, required_headers=("x-amz-target",))
        name = _operation(request)
        model = operation_model(SERVICE, name)
        params = checked_input(model, _input(request))
        request.user = caller.principal  # who ``allow`` authorizes and audits
        request_rate_check(tenant=caller.principal.tenant)
        answer = OPERATIONS[name](Call(request, caller.principal), params)
        body = json.dumps(rendered_output(model, answer))
    except AwsError as error:
        return _refused(error)
    except ShapeError as error:
        return _refused(validation(str(error)))
    except DomainError as error:
        missing = "ValidationException" if name in MISSING_IS_INVALID else "ResourceNotFound"
        return _refused(answered(error, missing=missing))
    except Exception:
        log.exception("SageMaker %s failed", name or "request")
        return aws_error_response(
            AwsError("InternalFailure", "The request processing has failed.", status=500)
        )
    return HttpResponse(body, content_type=JSON_1_1)


def _refused(error: AwsError) -> HttpResponse:
    note_failure(f"{error.code}: {error.message}")
    return aws_error_response(error)


def _operation(request: HttpRequest) -> str:
    if request.method != "POST":
        raise AwsError("UnknownOperationException", "The control plane takes POST requests.")
    target = request.headers.get("X-Amz-Target", "")
    name = target.removeprefix(TARGET_PREFIX)
    if not target.startswith(TARGET_PREFIX) or name not in OPERATIONS:
        raise AwsError(
            "UnknownOperationException",
            f"{target[:100]!r} is not an operation of this service; it serves "
            f"{', '.join(sorted(OPERATIONS))}",
        )
    return name


def _input(request: HttpRequest) -> object:
    """The JSON body; a presigned request's input is its query (botocore moves it there)."""
    body = request.body
    if not body.strip():
        query = request.META.get("QUERY_STRING", "")
        return {k: v for k, v in parse_qsl(query, max_num_fields=200) if not k.startswith("X-Amz-")}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past any input's depth
        raise AwsError("SerializationException", "The request body is not valid JSON.") from None
