"""The people (``tests/people.py``) calling the API with their keys, as tests of every face meet
them: ``alice`` and ``bob`` share a tenant, ``charlie`` has another."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.test import APIClient

from controlplane.tenants.models import Membership
from tests import people as people_


@dataclass
class Person:
    name: str
    client: APIClient
    tenant: object
    role_arn: str  # the tenant's session role
    key: str

    def post(self, path: str, body: dict | None = None, **kw):
        return self.client.post(f"/api/v1/{path}", body or {}, format="json", **kw)

    def get(self, path: str, params: dict | None = None, **kw):
        return self.client.get(f"/api/v1/{path}", params, **kw)


def api_client(raw: str) -> APIClient:
    """A test client that sends the API key ``raw`` with every request."""
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=raw)
    return client


def calling(account: people_.Account) -> Person:
    """``account`` calling the API with its key."""
    return Person(
        account.name, api_client(account.api_key), account.tenant, account.role_arn, account.api_key
    )


def member(name: str, of: Person, role: str = Membership.Role.MEMBER) -> Person:
    """Someone who joins ``of``'s tenant with a membership ``role``."""
    return calling(people_.member(name, of.tenant, of.role_arn, role))


def three_callers() -> tuple[Person, Person, Person]:
    """The three people (``tests/people.py``), each calling the API with their own key."""
    alice, bob, charlie = (calling(account) for account in people_.three_people())
    return alice, bob, charlie
