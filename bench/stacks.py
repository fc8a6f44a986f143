"""The stack a benchmark runs against: one of its own, started and stopped around it, or the one
``bench.quick`` shares among the quick presets that need no stack of a particular shape
(PostgreSQL, Redis, gunicorn and one worker on the tiny model, its ``/metrics`` port open), so
CI starts one stack for them instead of one each."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.stack import Stack, free_port

_shared: Stack | None = None


def start(stack: Stack) -> Stack:
    """``stack``, started; or the shared stack while there is one (``stack`` is then left
    unstarted)."""
    return _shared if _shared is not None else stack.start()


def stop(stack: Stack) -> None:
    if stack is not _shared:
        stack.stop()


@contextmanager
def shared() -> Iterator[Stack]:
    """One stack every ``start`` returns until the block ends: room for many sessions and
    models (the benchmarks' sessions add up), the worker's metrics port in its env."""
    global _shared
    env = {
        "LOOPWRIGHT_MAX_CONCURRENT_SESSIONS": "1000",
        "LOOPWRIGHT_WORKER_METRICS_PORT": str(free_port()),
    }
    folder = Path(tempfile.mkdtemp(prefix="lw-bench-shared-"))
    stack = Stack("postgres-redis", folder, {"quick0": ["--capacity", "64"]}, env=env).start()
    _shared = stack
    try:
        yield stack
    finally:
        _shared = None
        stack.stop()
