"""Streams in process on PostgreSQL, with the real listener and the worker runtime sending its
tokens: what the stream sends equals the unstreamed answer, also when the worker's tokens never
arrive (the completed operation fills the stream), and charlie's stream of alice's model is a
404 before anything is sent."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection, connections

from controlplane import pg_listen
from controlplane.completions import services
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


def streamed(
    person, runtime, path: str, body: dict, *, late: float = 0, raw_out=None
) -> list[dict]:
    """The chunks of a stream, the worker draining in its own thread (``late`` seconds after
    the submit) meanwhile."""
    r = person.client.post(f"/v1/{path}", {**body, "stream": True}, format="json")
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
    assert raw.endswith("data: [DONE]\n\n")
    if raw_out is not None:
        raw_out.append(raw)
    return [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]


def joined(chunks: list[dict], n: int) -> tuple[list[str], list[list[float]]]:
    text, logprobs = [""] * n, [[] for _ in range(n)]
    for chunk in chunks:
        for c in chunk["choices"]:
            text[c["index"]] += c["text"]
            if c["logprobs"]:
                logprobs[c["index"]] += c["logprobs"]["token_logprobs"]
    return text, logprobs


@pytest.mark.parametrize("tokens_arrive", [True, False])
def test_the_stream_is_the_answer(alice, runtime, model, monkeypatch, tokens_arrive) -> None:
    body = {"model": model, "prompt": ["ab", "xyz"], "max_tokens": 12, "seed": 3, "n": 2}
    body |= {"logprobs": 1, "stop": ["q"]}

    def drained(op, deadline):  # the unstreamed answer: the worker runs while the view waits
        runtime.drain()
        op.refresh_from_db()
        return op

    with monkeypatch.context() as patched:
        patched.setattr(services, "operation_wait", drained)
        whole = alice.client.post("/v1/completions", body, format="json").json()
    heard: list[int] = []
    sink = token_stream.publisher.sink

    def counted(request_ids, payloads):
        on_tokens = sink(request_ids, payloads)
        if on_tokens is None or not tokens_arrive:
            return None  # the worker sends nothing: the stream must come from the rows
        return lambda tokens: (heard.append(len(tokens)), on_tokens(tokens))

    monkeypatch.setattr(token_stream.publisher, "sink", counted)
    chunks = streamed(alice, runtime, "completions", body)
    text, logprobs = joined(chunks, 4)
    assert text == [c["text"] for c in whole["choices"]]
    assert logprobs == [c["logprobs"]["token_logprobs"] for c in whole["choices"]]
    finishes = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]
    ]
    assert sorted(finishes) == sorted(c["finish_reason"] for c in whole["choices"])
    assert bool(heard) == tokens_arrive


def test_charlie_streaming_alices_model_is_not_found(alice, charlie, model) -> None:
    for path, body in (("chat/completions", {"messages": HI}), ("completions", {"prompt": "a"})):
        r = charlie.client.post(
            f"/v1/{path}", {"model": model, **body, "stream": True}, format="json"
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_a_quiet_stream_sends_keep_alive_comments(alice, runtime, model, settings) -> None:
    settings.STREAM_KEEPALIVE_SECONDS = 0.5
    raw: list[str] = []
    body = {"model": model, "messages": HI, "max_tokens": 4, "seed": 1}
    chunks = streamed(alice, runtime, "chat/completions", body, late=2.5, raw_out=raw)
    assert ": keep-alive\n\n" in raw[0]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
