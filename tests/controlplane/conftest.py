"""Control-plane fixtures: three people (alice and bob share a tenant, charlie is another) and an
in-process worker runtime on the tiny model that tests drain explicitly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from controlplane.tenants.services import api_key_create, tenant_create
from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.host import HostConfig, ModelHost

TINY = TINY_MODEL


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.BROKER_URL = "memory://"
    settings.STORAGE_DIR = tmp_path / "storage"
    settings.LONG_POLL_SECONDS = 0.2
    settings.NOTIFY_ON_COMPLETION = False  # tests run inside a transaction: notices never commit


@dataclass
class Person:
    name: str
    client: APIClient
    tenant: object

    def post(self, path: str, body: dict | None = None, **kw):
        return self.client.post(f"/api/v1/{path}", body or {}, format="json", **kw)

    def get(self, path: str, params: dict | None = None, **kw):
        return self.client.get(f"/api/v1/{path}", params, **kw)


def _person(name: str, tenant) -> Person:
    _, raw = api_key_create(tenant=tenant, name=name)
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=raw)
    return Person(name, client, tenant)


@pytest.fixture
def people(db):
    acme, other = tenant_create(name="acme"), tenant_create(name="other")
    return _person("alice", acme), _person("bob", acme), _person("charlie", other)


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
        WorkerSettings(name="test0", base_model=TINY, capacity=4),
        host=tiny_host_factory(),
        heartbeat=False,
    )
