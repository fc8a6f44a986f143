"""Waiting in the server's placement queue: the progress shown on a long wait (a tqdm bar, or a
log line per change without tqdm), the limit the user sets on it (``queue_timeout``: the
session is stopped and ``QueueTimeoutError`` says where it stood), and a queued sampler."""

from __future__ import annotations

import logging
import sys
import time

import pytest
from fake_server import API_KEY, BASE_MODEL, FAST_RETRY, FakeServer

import loopwright._queue
from loopwright import QueueStatus, QueueTimeoutError, ServiceClient

REASON = f"waiting for a free slot on an open-network worker: 1 serves {BASE_MODEL}, it is full"


def place(position: int, waiting: int = 3, start: str | None = "2027-03-01T12:05:00Z") -> dict:
    return {
        "position": position,
        "waiting": waiting,
        "waits_for": "capacity",
        "base_model": BASE_MODEL,
        "network": "open network",
        "replicas": 1,
        "reason": REASON,
        "queued_at": "2027-03-01T12:00:00Z",
        "estimated_start_at": start,
        "estimate_basis": "models held a slot 60 s on average",
        "kind": "model",
    }


@pytest.fixture(autouse=True)
def _shown_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loopwright._queue, "LONG_WAIT_SECONDS", 0.0)


def test_a_long_wait_shows_its_place_as_it_moves_up(
    server: FakeServer, service: ServiceClient, capsys: pytest.CaptureFixture[str]
) -> None:
    server.queue_places = [place(3), place(2), place(1, start=None)]
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    assert client.model_id  # created once the queue let it go
    shown = capsys.readouterr().err
    assert f"model on {BASE_MODEL}: queued" in shown
    for words in (
        f"3 of 3 in line for a slot of {BASE_MODEL}, likely to start around 12:05:00 UTC",
        f"2 of 3 in line for a slot of {BASE_MODEL}",
        f"1 of 3 in line for a slot of {BASE_MODEL}",
    ):
        assert words in shown, shown


def test_without_tqdm_each_new_place_is_one_log_line(
    server: FakeServer,
    service: ServiceClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
    server.queue_places = [place(2), place(2), place(2), place(1)]
    with caplog.at_level(logging.WARNING, logger="loopwright"):
        service.create_lora_training_client(BASE_MODEL, rank=4)
    lines = [r.getMessage() for r in caplog.records if "placement queue" in r.getMessage()]
    assert lines == [
        f"model on {BASE_MODEL} waits in the placement queue: 2 of 3 in line for a slot of "
        f"{BASE_MODEL}, likely to start around 12:05:00 UTC",
        f"model on {BASE_MODEL} waits in the placement queue: 1 of 3 in line for a slot of "
        f"{BASE_MODEL}, likely to start around 12:05:00 UTC",
    ]


def test_a_short_wait_shows_nothing(
    server: FakeServer,
    service: ServiceClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(loopwright._queue, "LONG_WAIT_SECONDS", 60.0)
    server.queue_places = [place(1)]
    service.create_lora_training_client(BASE_MODEL, rank=4)
    assert "queued" not in capsys.readouterr().err


def test_the_queue_timeout_gives_up_leaves_the_queue_and_says_where_it_stood(
    server: FakeServer, service: ServiceClient
) -> None:
    server.queue_places, server.queue_forever = [place(2)], True
    started = time.monotonic()
    with pytest.raises(QueueTimeoutError) as raised:
        service.create_lora_training_client(BASE_MODEL, rank=4, queue_timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 5
    assert isinstance(raised.value, TimeoutError)  # caught as any timeout, too
    status = raised.value.status
    assert isinstance(status, QueueStatus) and (status.position, status.waits_for) == (
        2,
        "capacity",
    )
    assert str(raised.value) == (
        f"model on {BASE_MODEL} waited 0.3 s in the placement queue and left it: 2 of 3 in "
        f"line for a slot of {BASE_MODEL}, likely to start around 12:05:00 UTC ({REASON})"
    )
    # it left the queue: its session is stopped
    (session,) = server.sessions.values()
    assert session["state"] == "stopped"


def test_the_clients_queue_timeout_applies_and_a_create_may_set_its_own(
    server: FakeServer,
) -> None:
    with pytest.raises(ValueError, match="queue_timeout must be positive"):
        ServiceClient(api_key=API_KEY, transport=server.transport, queue_timeout=0)
    client = ServiceClient(
        api_key=API_KEY, transport=server.transport, retry=FAST_RETRY, queue_timeout=0.2
    )
    try:
        server.queue_places, server.queue_forever = [place(1)], True
        with pytest.raises(QueueTimeoutError):
            client.create_lora_training_client(BASE_MODEL, rank=4)
        server.queue_places, server.queue_forever = [place(1)] * 3, False
        assert client.create_lora_training_client(BASE_MODEL, rank=4, queue_timeout=30).model_id
    finally:
        client.close()


def test_a_wait_within_the_timeout_creates_the_model(
    server: FakeServer, service: ServiceClient
) -> None:
    server.queue_places = [place(2), place(1)]
    client = service.create_lora_training_client(BASE_MODEL, rank=4, queue_timeout=30)
    assert client.model_id in server.models


def test_a_queued_sampler_says_so_when_it_opens(
    server: FakeServer, service: ServiceClient, caplog: pytest.LogCaptureFixture
) -> None:
    server.sampler_queue = {**place(1, waiting=1, start=None), "kind": "sampler"}
    with caplog.at_level(logging.WARNING, logger="loopwright"):
        sampler = service.create_sampling_client(base_model=BASE_MODEL)
    assert any(
        f"sampler {sampler.sampling_session_id} waits in the placement queue: 1 of 1 in line"
        in r.getMessage()
        for r in caplog.records
    )


def test_a_wait_is_shown_once_it_has_lasted_even_between_answers() -> None:
    """The server holds each poll up to its long-poll time: the display does not wait for the
    next answer to appear."""
    import io

    from loopwright._queue import QueueProgress

    shown = io.StringIO()
    progress = QueueProgress("model on b", stream=shown, long_wait=0.2)
    progress.heard({"queue": place(2)})
    assert shown.getvalue() == ""
    deadline = time.monotonic() + 5
    while "2 of 3 in line" not in shown.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"2 of 3 in line for a slot of {BASE_MODEL}" in shown.getvalue()
    progress.heard({})  # placed: the bar ends
    assert progress.last is None and not progress.queued
    progress.close()
