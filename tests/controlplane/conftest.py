"""Control-plane fixtures: three people (alice and bob share a tenant, charlie is another) and an
in-process worker runtime on the tiny model that tests drain explicitly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from controlplane.iam.provisioning import account_create
from controlplane.tenants.models import Membership
from controlplane.tenants.services import api_key_create, membership_add, user_create
from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.host import HostConfig, ModelHost

TINY = TINY_MODEL


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.WORKER_LEASE_SECONDS = 600  # no heartbeat runs in these tests
    settings.BROKER_URL = "memory://"
    settings.STORAGE_DIR = tmp_path / "storage"
    settings.LONG_POLL_SECONDS = 0.2
    settings.NOTIFY_ON_COMPLETION = False  # tests run inside a transaction: notices never commit


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


def _client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=raw)
    return client


def owner(name: str, tenant_name: str) -> Person:
    """The owner of a new tenant, with the tenant's session role and an API key."""
    account = account_create(
        email=f"{name}@example.com", password=None, tenant_name=tenant_name, key_name=name
    )
    tenant = account.membership.tenant
    return Person(name, _client(account.api_key), tenant, account.session_role.arn, account.api_key)


def member(name: str, of: Person, role: str = Membership.Role.MEMBER) -> Person:
    """Someone who joins ``of``'s tenant with a membership ``role``."""
    user = user_create(email=f"{name}@example.com", password=None)
    membership_add(tenant=of.tenant, user=user, role=role)
    _, raw = api_key_create(tenant=of.tenant, user=user, name=name)
    return Person(name, _client(raw), of.tenant, of.role_arn, raw)


@pytest.fixture
def people(db):
    """alice owns acme, bob is a member of acme, charlie owns another tenant."""
    alice = owner("alice", "acme")
    return alice, member("bob", alice), owner("charlie", "other")


@pytest.fixture
def alice(people):
    return people[0]


@pytest.fixture
def bob(people):
    return people[1]


@pytest.fixture
def charlie(people):
    return people[2]


@pytest.fixture(scope="session")
def tiny_host_factory(tmp_path_factory):
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("models"))
    catalog.materialize(TINY)

    def make() -> ModelHost:
        return ModelHost(TINY, HostConfig(spill_dir=tmp_path_factory.mktemp("spill")), catalog)

    return make


@pytest.fixture
def runtime(db, tiny_host_factory):
    from workers.runtime import WorkerRuntime, WorkerSettings

    return WorkerRuntime(
        # snapshots are taken where a test asks for them
        WorkerSettings(
            name="test0",
            base_model=TINY,
            capacity=4,
            snapshot_every_steps=0,
            snapshot_every_seconds=0,
        ),
        host=tiny_host_factory(),
        heartbeat=False,
    )
