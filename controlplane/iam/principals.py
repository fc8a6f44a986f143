"""Who is calling: a member of a tenant (through a password login or their API key) or an IAM role
(through a key that belongs to it), and the policies that decide what they may do."""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.tenants.models import Membership, Tenant

from .builtin import membership_policy
from .models import ApiKey, Role
from .policy import PolicyDocument
from .resources import user_arn


@dataclass
class Principal:
    tenant: Tenant
    arn: str
    membership: Membership | None = None
    role: Role | None = None
    api_key: ApiKey | None = None
    _policies: list[tuple[str, PolicyDocument]] | None = field(default=None, repr=False)

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_role(self) -> bool:
        return self.role is not None

    @property
    def user(self):
        return self.membership.user if self.membership else None

    def policies(self) -> list[tuple[str, PolicyDocument]]:
        """Built once per request: the membership's built-in policy and inline policies."""
        if self._policies is None:
            self._policies = policies_of(membership=self.membership, role=self.role)
        return self._policies


def for_membership(membership: Membership, api_key: ApiKey | None = None) -> Principal:
    return Principal(
        tenant=membership.tenant,
        arn=user_arn(membership.tenant, membership.user.get_username()),
        membership=membership,
        api_key=api_key,
    )


def for_role(role: Role, api_key: ApiKey | None = None) -> Principal:
    return Principal(tenant=role.tenant, arn=role.arn, role=role, api_key=api_key)


def for_api_key(key: ApiKey) -> Principal | None:
    """The principal a live key acts as; None if its user has left the tenant."""
    if key.role_id is not None:
        return for_role(key.role, key)
    membership = (
        Membership.objects.select_related("user", "tenant")
        .filter(tenant_id=key.tenant_id, user_id=key.user_id, user__is_active=True)
        .first()
    )
    return for_membership(membership, key) if membership else None


def policies_of(
    *, membership: Membership | None = None, role: Role | None = None
) -> list[tuple[str, PolicyDocument]]:
    if role is not None:
        return [(p.name, PolicyDocument.parse(p.document)) for p in role.policies.all()]
    assert membership is not None  # noqa: S101 — an invariant of this code, not a check of input
    inline = [(p.name, PolicyDocument.parse(p.document)) for p in membership.policies.all()]
    return [(f"membership:{membership.role}", membership_policy(membership.role)), *inline]
