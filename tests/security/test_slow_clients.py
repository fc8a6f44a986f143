"""Slow clients cannot exhaust the server, on a live stack started as ``make serve`` starts it
(a 6-second request deadline instead of 60, so the test is short): more connections trickling
a body than the server has threads leave it answering everyone else; each trickler is answered
408 and dropped at the deadline, long before its body could arrive; headers trickled the same;
one address cannot hold more than its share of connections; and responses that take longer
than the deadline (SSE, long polls) still arrive whole."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import threading
import time

import psutil
import pytest
from openai import OpenAI

from loopwright import ServiceClient
from loopwright.types import SamplingParams

from .served import TINY, Served

pytestmark = pytest.mark.e2e

DEADLINE = 6
THREADS = 64  # make serve's
PER_ADDRESS = 64  # the default cap


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    env = {"LOOPWRIGHT_HTTP_REQUEST_DEADLINE": str(DEADLINE), "LOOPWRIGHT_LONG_POLL_SECONDS": "12"}
    running = Served(tmp_path_factory.mktemp("slow-clients"), env).start()
    try:
        yield running
    finally:
        running.stop()


def _connect(served: Served, address: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", served.port))
    sock.setblocking(False)
    return sock


def _trickle(socks: list[socket.socket], data: bytes, every: float, until: float) -> dict:
    """Send ``data`` one byte per ``every`` seconds on each socket, until each is answered or
    closed; {socket: (seconds, first bytes of the answer)}."""
    started, answered, sent = time.monotonic(), {}, 0
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    next_byte = started
    while len(answered) < len(socks) and time.monotonic() - started < until:
        now = time.monotonic()
        if now >= next_byte and sent < len(data):
            for sock in socks:
                if sock not in answered:
                    try:
                        sock.send(data[sent : sent + 1])
                    except OSError:
                        answered[sock] = (now - started, b"")
            sent, next_byte = sent + 1, now + every
        for key, _ in selector.select(timeout=0.2):
            if key.fileobj not in answered:
                try:
                    head = key.fileobj.recv(64)
                except OSError:
                    head = b""
                answered[key.fileobj] = (time.monotonic() - started, head)
                selector.unregister(key.fileobj)
    return answered


def _healthz(served: Served, address: str) -> int:
    with served.client(address, timeout=DEADLINE) as client:
        return client.get("/api/v1/healthz").status_code


def test_more_trickling_bodies_than_threads_stop_nobody(served) -> None:
    """THREADS + 16 connections from two addresses send a login body one byte a second (the
    review's attack held one thread each): meanwhile another client is answered at once, and
    every trickler gets 408 at the deadline (its 200-byte body would take 200 s)."""
    body = b'{"email": "x@example.com", "password": "' + b"p" * 160 + b'"}'
    head = (
        b"POST /api/v1/auth/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    socks = [_connect(served, "127.0.0.81") for _ in range(THREADS // 2 + 8)]
    socks += [_connect(served, "127.0.0.82") for _ in range(THREADS // 2 + 8)]
    for sock in socks:
        sock.sendall(head)  # the headers at once: then the body, a byte a second
    results: dict = {}
    trickling = threading.Thread(
        target=lambda: results.update(_trickle(socks, body, every=1.0, until=4 * DEADLINE))
    )
    trickling.start()
    time.sleep(2)
    assert _healthz(served, "127.0.0.83") == 200  # not queued behind the tricklers
    trickling.join()
    for sock in socks:
        sock.close()
    assert len(results) == len(socks)
    assert all(answer.startswith(b"HTTP/1.1 408") for _, answer in results.values()), {
        answer for _, answer in results.values()
    }
    assert max(seconds for seconds, _ in results.values()) < 3 * DEADLINE


def test_trickled_headers_and_silent_connections_meet_the_deadline(served) -> None:
    request = (
        b"GET /api/v1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"p" * 100 + b"\r\n\r\n"
    )
    silent = _connect(served, "127.0.0.84")
    results = _trickle([silent], b"", every=1.0, until=4 * DEADLINE)
    trickler = _connect(served, "127.0.0.84")
    results |= _trickle([trickler], request, every=0.5, until=4 * DEADLINE)
    for sock in (trickler, silent):
        seconds, answer = results[sock]
        assert answer.startswith(b"HTTP/1.1 408") and DEADLINE - 1 < seconds < 3 * DEADLINE
        sock.close()


def test_one_address_holds_at_most_its_share_of_connections(served) -> None:
    socks = [_connect(served, "127.0.0.85") for _ in range(PER_ADDRESS + 6)]
    time.sleep(1)
    refused = []
    for sock in socks:
        try:
            refused.append(sock.recv(64).startswith(b"HTTP/1.1 429"))
        except BlockingIOError:
            refused.append(False)  # held open, waiting for its request
    assert sum(refused) == 6
    assert _healthz(served, "127.0.0.86") == 200
    for sock in socks:
        sock.close()
    time.sleep(0.5)
    assert _healthz(served, "127.0.0.85") == 200  # closed connections are counted out


def _worker(served: Served) -> psutil.Process:
    assert served.proc is not None
    children = psutil.Process(served.proc.pid).children(recursive=True)
    return next(p for p in children if "workers.run" in " ".join(p.cmdline()))


def test_responses_longer_than_the_deadline_still_stream(served) -> None:
    """With the worker paused past the deadline, an SSE chat completion and the SDK's
    sample (its streamed answer and long polls) wait, then arrive whole."""
    alice = served.signup("alice", "127.0.0.87")
    svc = ServiceClient(
        base_url=served.url, api_key=alice["api_key"], role_arn=alice["session_role_arn"]
    )
    with svc:
        training = svc.create_lora_training_client(TINY, rank=4, seed=0)
        sampler = training.save_weights_and_get_sampling_client()
        openai = OpenAI(base_url=f"{served.url}/v1", api_key=alice["api_key"], max_retries=0)
        worker = _worker(served)
        outcome: dict = {}

        def stream() -> None:
            chunks = openai.chat.completions.create(
                model=training.model_id,
                messages=[{"role": "user", "content": "1, 2, 3"}],
                max_tokens=8,
                stream=True,
            )
            outcome["chunks"] = list(chunks)

        def sample() -> None:
            future = sampler.sample([1, 2, 3], num_samples=1,
                                    sampling_params=SamplingParams(max_tokens=4))  # fmt: skip
            outcome["sample"] = future.result()

        os.kill(worker.pid, signal.SIGSTOP)
        try:
            waiting = [threading.Thread(target=stream), threading.Thread(target=sample)]
            for thread in waiting:
                thread.start()
            time.sleep(DEADLINE + 2)
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        for thread in waiting:
            thread.join(timeout=120)
    assert outcome["chunks"] and outcome["chunks"][-1].choices[0].finish_reason is not None
    assert len(outcome["sample"].sequences[0].tokens) > 0
