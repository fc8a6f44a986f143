"""The dashboard as the three people (``tests/people.py``) see it: logged-in clients, each
carrying ``.tenant``, ``.user``, ``.membership`` (and ``.role_arn``, the tenant's session role,
and ``.api_key``), and the rows its pages show, made as the API and a worker make them."""

from __future__ import annotations

from django.test import Client

from controlplane.tenants.models import Membership
from tests import people as people_
from tests.people import PASSWORD

BASE_MODEL = "acme/base"


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
