"""Workers wake on PostgreSQL notices naming their queue: no broker hop between a submit's
commit and the worker looking for work."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from controlplane import dispatch
from controlplane.pg_listen import connect_params
from workers.wake import WakeListener

pytestmark = pytest.mark.django_db(transaction=True)


def _notify(payload: str) -> None:
    with psycopg.connect(autocommit=True, **connect_params()) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", [dispatch.WAKE_CHANNEL, payload])


@pytest.fixture
def listener():
    if connection.vendor != "postgresql":
        pytest.skip("wake-ups by NOTIFY need PostgreSQL")
    drains: list[int] = []
    drained = threading.Event()

    def drain() -> int:
        drains.append(1)
        drained.set()
        return 0

    stop = threading.Event()
    wake = WakeListener("gpu.mine", drain, stop).start()
    assert wake.listening.wait(10)
    assert drained.wait(5)  # the first pass after LISTEN: work submitted before it is not missed
    drained.clear()
    drains.clear()
    yield wake, drains, drained
    stop.set()


def test_a_notice_for_its_queue_drains(listener) -> None:
    _wake, drains, drained = listener
    _notify("gpu.mine")
    assert drained.wait(5)
    assert drains == [1]


def test_a_notice_for_another_queue_does_not(listener) -> None:
    _wake, drains, drained = listener
    _notify("gpu.other")
    assert not drained.wait(1.5)
    assert drains == []


def test_wake_worker_sends_the_notice_at_commit(listener, settings) -> None:
    _wake, _drains, drained = listener
    settings.WAKE_WORKERS_BY_NOTIFY = True
    from django.db import transaction

    with transaction.atomic():
        dispatch.wake_worker("gpu.mine")
        assert not drained.wait(0.5)  # not before the commit
    assert drained.wait(5)
