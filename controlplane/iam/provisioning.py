"""A new account in one step: tenant, owner, the role sessions run as, and a first API key."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from controlplane.tenants.models import Membership
from controlplane.tenants.services import signup

from .models import Role
from .principals import for_membership
from .services import api_key_create, tenant_bootstrap


@dataclass(frozen=True)
class NewAccount:
    membership: Membership
    session_role: Role
    api_key: str  # shown once

    @property
    def owner_arn(self) -> str:
        return for_membership(self.membership).arn


@transaction.atomic
def account_create(
    *, email: str, password: str | None, tenant_name: str, key_name: str = "first key"
) -> NewAccount:
    membership = signup(email=email, password=password, tenant_name=tenant_name)
    role = tenant_bootstrap(tenant=membership.tenant, actor=for_membership(membership).arn)
    _, raw = api_key_create(tenant=membership.tenant, user=membership.user, name=key_name)
    return NewAccount(membership, role, raw)
