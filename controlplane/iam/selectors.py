"""Reads of roles and policies, always within one tenant (another tenant's role is not found)."""

from __future__ import annotations

import re

from django.db.models import QuerySet

from controlplane.errors import NotFound
from controlplane.tenants.models import Tenant

from .arns import Arn, ArnError
from .models import Role

ROLE_NAME = re.compile(r"^[A-Za-z0-9+=,.@_-]{1,64}$")


def roles(*, tenant: Tenant) -> QuerySet[Role]:
    return Role.objects.filter(tenant=tenant).select_related("tenant").order_by("name")


def role_get(*, tenant: Tenant, name: str, field: str = "role") -> Role:
    found = roles(tenant=tenant).filter(name=name).first()
    if found is None:
        raise NotFound(f"{field}: no role {name!r}", field=field)
    return found


def role_by_arn(*, tenant: Tenant, arn: str, field: str = "role_arn") -> Role:
    """The tenant's role with this ARN; a malformed ARN or another account's is not found."""
    try:
        parsed = Arn.parse(arn)
    except ArnError:
        raise NotFound(f"{field}: no role {arn!r}", field=field) from None
    if (
        parsed.service != "iam"
        or parsed.resource_type != "role"
        or parsed.account != tenant.account_id
    ):
        raise NotFound(f"{field}: no role {arn!r}", field=field)
    return role_get(tenant=tenant, name=parsed.resource_id, field=field)
