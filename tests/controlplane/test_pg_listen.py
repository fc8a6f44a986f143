"""The process's PostgreSQL listener: each subscriber hears its own channel, including one that
subscribes while the listener already runs, and is told whenever LISTEN (re)starts or stops."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection

from controlplane import pg_listen

pytestmark = pytest.mark.django_db(transaction=True)


def _notify(channel: str, payload: str) -> None:
    with psycopg.connect(autocommit=True, **pg_listen.connect_params()) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", [channel, payload])


class Heard:
    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.resets = 0
        self.event = threading.Event()

    def notice(self, payload: str) -> None:
        self.payloads.append(payload)
        self.event.set()

    def reset(self) -> None:
        self.resets += 1


@pytest.fixture
def listener():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN is PostgreSQL's")
    listener = pg_listen.Listener()
    yield listener
    listener.stop()


def test_each_subscriber_hears_its_own_channel(listener) -> None:
    first, second = Heard(), Heard()
    listener.subscribe("lw_test_first", first.notice, first.reset)
    listener.subscribe("lw_test_second", second.notice)
    assert listener.start(wait=10)
    assert first.resets == 1  # as LISTEN took effect
    _notify("lw_test_second", "for the second")
    assert second.event.wait(5)
    assert (first.payloads, second.payloads) == ([], ["for the second"])
    listener.stop()
    assert first.resets == 2 and not listener.ready()  # no longer hearing: told so


def test_a_channel_subscribed_while_it_listens_is_heard_once_in_place(listener) -> None:
    listener.subscribe("lw_test_first", Heard().notice)
    assert listener.start(wait=10)
    late = Heard()
    listener.subscribe("lw_test_late", late.notice, late.reset)
    deadline = time.monotonic() + 10
    while not listener.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.ready() and late.resets == 1
    _notify("lw_test_late", "hello")
    assert late.event.wait(5) and late.payloads == ["hello"]


def test_a_passing_channel_is_heard_at_once_and_no_longer_once_unlistened(listener) -> None:
    listener.subscribe("lw_test_first", Heard().notice)
    assert listener.start(wait=10)
    passing = Heard()
    started = time.monotonic()
    listened = listener.listen("lw_Test-passing.1", passing.notice)  # any name, case kept
    assert listened.wait(5)
    assert time.monotonic() - started < 0.5  # the thread was woken, not left to its timeout
    _notify("lw_Test-passing.1", "one")
    assert passing.event.wait(5) and passing.payloads == ["one"]
    listener.unlisten("lw_Test-passing.1")
    again = listener.listen("lw_test_other", Heard().notice)  # LISTEN after the UNLISTEN
    assert again.wait(5)
    _notify("lw_Test-passing.1", "two")
    _notify("lw_test_first", "after")
    time.sleep(0.3)
    assert passing.payloads == ["one"]


def test_passing_channels_are_listened_again_after_a_reconnection(listener) -> None:
    passing = Heard()
    assert listener.listen("lw_test_kept", passing.notice).wait(10)
    listener.stop()
    assert listener.start(wait=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not passing.payloads:
        _notify("lw_test_kept", "back")
        passing.event.wait(0.2)
    assert passing.payloads and passing.payloads[0] == "back"
