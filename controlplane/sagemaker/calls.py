"""One call of the control plane as its operations see it (the request, the caller, the
tenant), and the domain refusals it answers in the service model's names and fields."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import HttpRequest

from controlplane.access_keys.aws_errors import AwsError, aws_error_of
from controlplane.errors import Conflict, DomainError, NotFound
from controlplane.iam.principals import Principal
from controlplane.sagemaker_sessions.errors import NameInUse
from controlplane.sagemaker_sessions.shapes import timestamp_of
from controlplane.tenants.models import Tenant


@dataclass(frozen=True)
class Call:
    request: HttpRequest
    principal: Principal

    @property
    def tenant(self) -> Tenant:
        return self.principal.tenant


# the services' field names, as the SageMaker API names the same things
_FIELDS = (
    ("role_arn", "RoleArn"),
    ("kms_key_arn", "OutputConfig.S3Location.KmsKeyArn"),
    ("s3_output_path", "OutputConfig.S3Location.Path"),
    ("model_package_group_arn", "ModelPackageGroupArn"),
    ("vpc_config.subnets", "VpcConfig.Subnets"),
    ("vpc_config.security_group_ids", "VpcConfig.SecurityGroupIds"),
    ("vpc_config", "VpcConfig"),
    ("lora_config.rank", "LoraConfig.Rank"),
    ("lora_config.alpha", "LoraConfig.Alpha"),
    ("lora_config", "LoraConfig"),
    ("base_model", "ModelConfig.BaseModelArn"),
)
_LEADING_FIELD = re.compile(r"^[a-z_]+(?:\.[a-z_]+)*(?:\[\d+\])?")


def aws_field(detail: str) -> str:
    """``detail`` with its leading service field name in the SageMaker API's words."""
    found = _LEADING_FIELD.match(detail)
    if not found:
        return detail
    for ours, theirs in _FIELDS:
        if found.group(0).startswith(ours):
            return theirs + detail[len(ours) :]
    return detail


def answered(exc: DomainError, *, missing: str = "ResourceNotFound") -> AwsError:
    """The AWS error of a domain refusal. ``missing``: how this operation says a resource is
    not there (``ResourceNotFound``, or ``ValidationException`` for model packages, as
    SageMaker itself says it)."""
    detail = aws_field(exc.detail)
    if isinstance(exc, NameInUse):
        return AwsError("ResourceInUse", detail)
    if isinstance(exc, NotFound):
        return AwsError(missing, detail)
    if isinstance(exc, Conflict):
        return AwsError("ConflictException", detail)
    error = aws_error_of(exc)
    error.message = aws_field(error.message)
    return error


def validation(message: str) -> AwsError:
    return AwsError("ValidationException", message)


def created_between(found: QuerySet, p: dict) -> QuerySet:
    """``found`` narrowed by a list request's ``CreationTimeAfter`` / ``CreationTimeBefore``."""
    if p.get("CreationTimeAfter") is not None:
        found = found.filter(
            created_at__gt=timestamp_of(p["CreationTimeAfter"], "CreationTimeAfter")
        )
    if p.get("CreationTimeBefore") is not None:
        found = found.filter(
            created_at__lt=timestamp_of(p["CreationTimeBefore"], "CreationTimeBefore")
        )
    return found
