"""The three people every test of a face meets: alice owns the tenant acme, bob is a member of
acme, charlie owns another tenant and must never see acme's things. Each face's conftest wraps
them as its own client (an API client with their key, a logged-in browser session)."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.iam.provisioning import account_create
from controlplane.iam.services import api_key_create
from controlplane.tenants.models import Membership
from controlplane.tenants.services import membership_add, user_create

PASSWORD = "correct horse battery staple"


@dataclass
class Account:
    name: str
    membership: Membership
    role_arn: str  # the tenant's session role
    api_key: str

    @property
    def tenant(self):
        return self.membership.tenant

    @property
    def user(self):
        return self.membership.user


def owner(name: str, tenant_name: str, *, password: str | None = None) -> Account:
    """The owner of a new tenant, with the tenant's session role and an API key."""
    account = account_create(
        email=f"{name}@example.com", password=password, tenant_name=tenant_name, key_name=name
    )
    return Account(name, account.membership, account.session_role.arn, account.api_key)


def member(
    name: str,
    tenant,
    role_arn: str,
    role: str = Membership.Role.MEMBER,
    *,
    password: str | None = None,
) -> Account:
    """Someone who joins ``tenant`` with a membership ``role`` and an API key."""
    user = user_create(email=f"{name}@example.com", password=password)
    membership = membership_add(tenant=tenant, user=user, role=role)
    _, raw = api_key_create(tenant=tenant, user=user, name=name)
    return Account(name, membership, role_arn, raw)


def three_people(*, password: str | None = None) -> tuple[Account, Account, Account]:
    """alice and bob in acme, charlie in another tenant (with ``password``, to log in with)."""
    alice = owner("alice", "acme", password=password)
    bob = member("bob", alice.tenant, alice.role_arn, password=password)
    return alice, bob, owner("charlie", "other", password=password)
