"""A session runs as an IAM role: the caller must be allowed to pass it, its trust policy must let
the sessions service assume it, and the session's own writes are checked against its policies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant

from .access import authorize
from .evaluation import Decision
from .models import SESSIONS_SERVICE, Role
from .principals import Principal, for_role
from .selectors import role_by_arn
from .services import trust_required


def session_role(caller: Principal, role_arn: str | None, *, request=None) -> Role:
    """The role a new session will run as: the one named, else the calling role's own."""
    if not role_arn:
        if caller.role is None:
            raise DomainError(
                "role_arn is required: the IAM role the session runs as "
                "(arn:loopwright:iam::<account>:role/<name>)",
                field="role_arn",
            )
        role_arn = caller.role.arn
    role = role_by_arn(tenant=caller.tenant, arn=role_arn)
    authorize(
        caller,
        "iam:PassRole",
        role.arn,
        request=request,
        context={"iam:PassedToService": SESSIONS_SERVICE},
    )
    trust_required(role, SESSIONS_SERVICE)
    return role


def acting_role(tenant: Tenant, role_arn: str) -> Principal:
    """The session's role as a principal, for checking what the session itself writes."""
    return for_role(role_by_arn(tenant=tenant, arn=role_arn))


def session_may(
    tenant: Tenant,
    role_arn: str | None,
    action: str,
    resource: str,
    *,
    context: Mapping[str, Any] | None = None,
) -> Decision | None:
    """Authorize the session's role (403 if its policies do not allow it); None without a role
    (sessions created before roles were required)."""
    if not role_arn:
        return None
    return authorize(acting_role(tenant, role_arn), action, resource, context=context)
