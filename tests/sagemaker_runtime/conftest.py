"""The in-process tests of the SageMaker runtime face: the control-plane tests' people and
in-process worker, each person with an access key of their tenant's session role and boto3's
runtime client signing with it, and alice's training session ``ts-alice``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controlplane.completions import services
from tests import people as people_
from tests.support.access_keys import role_key
from tests.support.callers import Person, calling

from .boto import runtime_client
from .sessions import training_session


@pytest.fixture(autouse=True)
def _settings(control_plane_settings):
    """Every test here runs with the control plane's test settings."""


@dataclass
class Caller:
    """A person calling both faces: the Tinker API with their API key (``api``) and the
    runtime with boto3 signing with an access key of their tenant's session role (``sm``)."""

    api: Person
    sm: object
    key_id: str
    secret: str

    @property
    def tenant(self):
        return self.api.tenant


def _caller(account: people_.Account) -> Caller:
    holder = role_key(account)
    return Caller(
        calling(account),
        runtime_client(holder.key_id, holder.secret),
        holder.key_id,
        holder.secret,
    )


@pytest.fixture
def people(db):
    return tuple(_caller(account) for account in people_.three_people())


@pytest.fixture
def ts(alice, runtime) -> str:
    """alice's training session ``ts-alice`` (a LoRA of rank 4 on the tiny model, seed 0)."""
    return training_session(alice.api, runtime, "ts-alice")


@pytest.fixture(autouse=True)
def drained(monkeypatch, runtime):
    """The worker runs what was submitted while a view waits for it (drained, in process)."""

    def wait(op, deadline):
        runtime.drain()
        op.refresh_from_db()
        return op

    monkeypatch.setattr(services, "operation_wait", wait)
    from controlplane.sagemaker_runtime import results

    monkeypatch.setattr(
        results.notices, "wait_finished", lambda op, deadline, waiter=None: wait(op, deadline)
    )
