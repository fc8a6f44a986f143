"""Dashboard fixtures: the three people (``tests/people.py``) logged in with Django's test client.
Each client carries ``.tenant``, ``.user``, ``.membership`` (and ``.role_arn``, the tenant's
session role, and ``.api_key``)."""

from __future__ import annotations

import pytest
from django.test import Client

from controlplane.tenants.models import Membership
from tests import people as people_
from tests.fleet import registration
from tests.people import PASSWORD

__all__ = ["PASSWORD"]  # the tests log in with it


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.WORKER_LEASE_SECONDS = 600  # no heartbeat runs in these tests
    settings.BROKER_URL = "memory://"
    settings.STORAGE_DIR = tmp_path / "storage"
    settings.LONG_POLL_SECONDS = 0.2
    settings.NOTIFY_ON_COMPLETION = False  # tests run inside a transaction: notices never commit


def logged_in(membership: Membership, *, role_arn: str, api_key: str) -> Client:
    client = Client()
    client.force_login(membership.user)
    client.tenant = membership.tenant
    client.user = membership.user
    client.membership = membership
    client.role_arn = role_arn
    client.api_key = api_key
    return client


def browsing(account: people_.Account) -> Client:
    """``account`` logged in to the dashboard."""
    return logged_in(account.membership, role_arn=account.role_arn, api_key=account.api_key)


def member(name: str, of: Client, role: str = Membership.Role.MEMBER) -> Client:
    """Someone who joins ``of``'s tenant with a membership ``role``, logged in."""
    return browsing(people_.member(name, of.tenant, of.role_arn, role, password=PASSWORD))


@pytest.fixture
def people(db):
    """The three people (``tests/people.py``) with password ``PASSWORD``, logged in."""
    return tuple(browsing(account) for account in people_.three_people(password=PASSWORD))


BASE_MODEL = "acme/base"


@pytest.fixture
def worker(db):
    """A live worker serving ``BASE_MODEL`` (no process behind it: operations stay queued)."""
    from controlplane.fleet.services import worker_register

    return worker_register(**registration("gpu0", BASE_MODEL)).worker


def train_tokens(n: int) -> dict:
    """A forward_backward request body of one datum of ``n`` tokens (metered as train_tokens)."""
    chunk = {"type": "encoded_text", "tokens": list(range(n))}
    return {"forward_backward_input": {"data": [{"model_input": {"chunks": [chunk]}}]}}


def finish(op, result: dict | None = None, *, error: str = ""):
    """Run ``op`` as a worker would: claim it, then complete it with ``result`` (usage rows and
    all) or fail it with ``error``."""
    from controlplane.fleet.services import Fence
    from controlplane.operations import claim, complete

    op.refresh_from_db()  # placed after it was made: on its worker now
    fence = Fence(op.worker.pk, op.worker.generation)
    assert claim.claim(op, fence)
    if error:
        complete.fail(op, error, "user", fence)
    else:
        complete.complete(op, result or {}, fence)
    op.refresh_from_db()
    return op


def operation(model, kind: str, seq_id: int, payload: dict | None = None):
    """A queued operation of ``model`` (as the submit path records one)."""
    from controlplane.training_sessions.models import Operation

    return Operation.objects.create(
        tenant=model.tenant,
        session=model.session,
        model=model,
        worker=model.worker,
        seq_id=seq_id,
        kind=kind,
        payload=payload or {},
        payload_digest=f"{kind}-{seq_id}",
    )
