"""SDK test fixtures: a fake server, a ServiceClient wired to it, fast retries and polls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from fake_server import API_KEY, FAST_RETRY, FakeServer

import loopwright.futures
from loopwright import ServiceClient


def loopwright_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("loopwright")]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.delenv("LOOPWRIGHT_API_KEY", raising=False)
    monkeypatch.delenv("LOOPWRIGHT_BASE_URL", raising=False)
    monkeypatch.setenv("LOOPWRIGHT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setattr(loopwright.futures, "POLL_BACKOFF_START", 0.001)
    monkeypatch.setattr(loopwright.futures, "POLL_BACKOFF_MAX", 0.005)


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    before = set(loopwright_threads())
    yield
    deadline = time.monotonic() + 5
    while (set(loopwright_threads()) - before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(loopwright_threads()) - before, "a client was not closed"


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def service(server: FakeServer) -> Iterator[ServiceClient]:
    client = ServiceClient(api_key=API_KEY, transport=server.transport, retry=FAST_RETRY)
    yield client
    client.close()
