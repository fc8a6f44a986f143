"""The three people as holders of access keys: alice's acts as her tenant's session role,
bob's as himself, charlie's as his own tenant's role."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controlplane.access_keys.services import access_key_create
from controlplane.iam.selectors import role_by_arn
from tests import people as people_


@dataclass
class KeyHolder:
    account: people_.Account
    key_id: str
    secret: str

    @property
    def tenant(self):
        return self.account.tenant


def role_key(account: people_.Account) -> KeyHolder:
    role = role_by_arn(tenant=account.tenant, arn=account.role_arn)
    key, secret = access_key_create(
        tenant=account.tenant, actor="test", name=account.name, role=role
    )
    return KeyHolder(account, key.access_key_id, secret)


def user_key(account: people_.Account) -> KeyHolder:
    key, secret = access_key_create(
        tenant=account.tenant, actor="test", name=account.name, user=account.user
    )
    return KeyHolder(account, key.access_key_id, secret)


@pytest.fixture
def holders(db):
    alice, bob, charlie = people_.three_people()
    return role_key(alice), user_key(bob), role_key(charlie)
