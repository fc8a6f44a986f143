"""Control-plane fixtures: the three people as API callers (``alice``, ``bob`` and ``charlie``
themselves are in ``tests/conftest.py``) and an in-process worker runtime on the tiny model that
tests drain explicitly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from controlplane.tenants.models import Membership
from tests import people as people_
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


def calling(account: people_.Account) -> Person:
    """``account`` calling the API with its key."""
    return Person(
        account.name, _client(account.api_key), account.tenant, account.role_arn, account.api_key
    )


def member(name: str, of: Person, role: str = Membership.Role.MEMBER) -> Person:
    """Someone who joins ``of``'s tenant with a membership ``role``."""
    return calling(people_.member(name, of.tenant, of.role_arn, role))


@pytest.fixture
def people(db):
    """The three people (``tests/people.py``), each calling the API with their own key."""
    return tuple(calling(account) for account in people_.three_people())


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
