"""Access key pairs of the people (``tests/people.py``): one acting as a tenant's session role,
or as the person."""

from __future__ import annotations

from dataclasses import dataclass

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
