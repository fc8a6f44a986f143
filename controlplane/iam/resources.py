"""ARNs of the things policies talk about (the catalogue in ``actions`` names their types)."""

from __future__ import annotations

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant

from .arns import ArnError
from .arns import build_arn as _build


class InvalidResourceId(DomainError):
    """An id or name no resource can have (it would make no valid ARN)."""


def build_arn(service: str, account: str, resource_type: str, resource_id: str) -> str:
    """The ARN of a resource a request names; a 400 saying why if no resource can have that
    id (empty, control characters)."""
    try:
        return _build(service, account, resource_type, resource_id)
    except ArnError as exc:
        raise InvalidResourceId(f"not a valid {resource_type} id or name: {exc}") from None


def session_arn(tenant: Tenant, session_id: str) -> str:
    return build_arn("sessions", tenant.account_id, "session", session_id)


def model_arn(tenant: Tenant, model_id: str) -> str:
    return build_arn("sessions", tenant.account_id, "model", model_id)


def sampler_arn(tenant: Tenant, sampler_id: str) -> str:
    return build_arn("sessions", tenant.account_id, "sampler", sampler_id)


def checkpoint_arn(tenant: Tenant, model_id: str, name: str) -> str:
    return build_arn("sessions", tenant.account_id, "checkpoint", f"{model_id}/{name}")


def role_arn(tenant: Tenant, name: str) -> str:
    return build_arn("iam", tenant.account_id, "role", name)


def user_arn(tenant: Tenant, username: str) -> str:
    return build_arn("iam", tenant.account_id, "user", username)


def api_key_arn(tenant: Tenant, prefix: str) -> str:
    return build_arn("iam", tenant.account_id, "api-key", prefix)


def budget_arn(tenant: Tenant, name: str) -> str:
    return build_arn("billing", tenant.account_id, "budget", name)


def model_package_group_arn(tenant: Tenant, name: str) -> str:
    return build_arn("registry", tenant.account_id, "model-package-group", name)


def model_package_arn(tenant: Tenant, group: str, version: int | str) -> str:
    return build_arn("registry", tenant.account_id, "model-package", f"{group}/{version}")
