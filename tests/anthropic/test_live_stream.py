"""Anthropic's streams in process on PostgreSQL, with the real listener and the worker runtime
sending its tokens: the text deltas equal the unstreamed answer (also when the worker's tokens
never arrive and the completed operation fills the stream), a stop sequence is held back and
echoed, a quiet stream sends pings, and a failure is a last ``error`` event."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection, connections

from controlplane import pg_listen
from controlplane.completions import services
from controlplane.training_sessions.models import Operation
from tests.support.wire import create_model, open_session
from workers import token_stream

pytestmark = pytest.mark.django_db(transaction=True)

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def model(settings, alice, runtime):
    if connection.vendor != "postgresql":
        pytest.skip("tokens are streamed over PostgreSQL notices")
    settings.NOTIFY_ON_COMPLETION = True  # this test commits: notices are delivered
    yield create_model(alice, runtime, open_session(alice))
    token_stream.publisher.close()
    pg_listen.listener.stop()  # before the test database goes


def post(person, body: dict):
    return person.client.post("/v1/messages", body, format="json", HTTP_X_API_KEY=person.key)


def streamed(person, runtime, body: dict, *, late: float = 0) -> list[tuple[str, dict]]:
    """The named events of a stream, the worker draining in its own thread (``late`` seconds
    after the submit) meanwhile."""
    r = post(person, {**body, "stream": True})
    assert r.status_code == 200 and r["Content-Type"] == "text/event-stream", r.content

    def drain() -> None:
        try:
            time.sleep(late)
            runtime.drain()
        finally:
            connections.close_all()  # this thread's connections

    worker = threading.Thread(target=drain)
    worker.start()
    raw = b"".join(r.streaming_content).decode()
    worker.join(60)
    events = []
    for frame in filter(None, raw.split("\n\n")):
        name, data = frame.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def unstreamed(alice, runtime, monkeypatch, body: dict) -> dict:
    def drained(op, deadline):  # the worker runs while the view waits
        runtime.drain()
        op.refresh_from_db()
        return op

    with monkeypatch.context() as patched:
        patched.setattr(services, "operation_wait", drained)
        r = post(alice, body)
    assert r.status_code == 200, r.content
    return r.json()


def text_of(events) -> str:
    return "".join(e["delta"]["text"] for name, e in events if name == "content_block_delta")


@pytest.mark.parametrize("tokens_arrive", [True, False])
def test_the_stream_is_the_answer(alice, runtime, model, monkeypatch, tokens_arrive) -> None:
    body = {"model": model, "messages": HI, "max_tokens": 16, "temperature": 0}
    whole = unstreamed(alice, runtime, monkeypatch, body)
    stop = whole["content"][0]["text"][4:6]
    body["stop_sequences"] = [stop]
    cut = unstreamed(alice, runtime, monkeypatch, body)
    assert cut["stop_reason"] == "stop_sequence" and cut["stop_sequence"] == stop
    heard: list[int] = []
    sink = token_stream.publisher.sink

    def counted(request_ids, payloads):
        on_tokens = sink(request_ids, payloads)
        if on_tokens is None or not tokens_arrive:
            return None  # the worker sends nothing: the stream must come from the rows
        return lambda tokens: (heard.append(len(tokens)), on_tokens(tokens))

    monkeypatch.setattr(token_stream.publisher, "sink", counted)
    events = streamed(alice, runtime, body)
    assert bool(heard) == tokens_arrive
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) <= {"content_block_delta", "ping"}
    assert text_of(events) == cut["content"][0]["text"]  # the stop sequence never sent
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}
    assert events[-2][1]["usage"]["output_tokens"] == cut["usage"]["output_tokens"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == cut["usage"]["input_tokens"]


def test_a_quiet_stream_sends_pings(alice, runtime, model, settings) -> None:
    settings.STREAM_KEEPALIVE_SECONDS = 0.5
    body = {"model": model, "messages": HI, "max_tokens": 4}
    events = streamed(alice, runtime, body, late=2.5)
    names = [name for name, _ in events]
    assert names.count("ping") >= 2  # the one after content_block_start, then keep-alives
    assert names[-1] == "message_stop"


def test_a_failure_once_begun_is_a_last_error_event(alice, runtime, model, settings) -> None:
    settings.OPENAI_WAIT_SECONDS = 1  # the worker is not drained in time
    r = post(alice, {"model": model, "messages": HI, "max_tokens": 4, "stream": True})
    assert r.status_code == 200
    raw = b"".join(r.streaming_content).decode()
    last = raw.strip().split("\n\n")[-1]
    assert last.startswith("event: error\n")
    error = json.loads(last.split("\n")[1].removeprefix("data: "))
    assert error["type"] == "error" and error["error"]["type"] == "timeout_error"
    assert "still runs and will be metered" in error["error"]["message"]
    assert Operation.objects.filter(kind="sample").count() == 1
    runtime.drain()
