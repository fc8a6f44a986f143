"""The CPU time a worker spends inside engine calls, counted per engine method
(``loopwright_worker_engine_cpu_seconds``): what the rest of the process's CPU time is set
against when one asks what an operation costs outside the model (``bench/op_cost.py``).

Process time (every thread: torch's own threads work for the call) from entry to return of
the outermost engine call of the calling thread; a call made inside another is the outer one's.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from controlplane import metrics

F = TypeVar("F", bound=Callable[..., Any])
_inside = threading.local()


def engine_call(fn: F) -> F:
    """Count ``fn``'s CPU time and calls under its name (nested calls: the outer one's)."""
    seconds = metrics.ENGINE_CPU_SECONDS.labels(fn.__name__)
    calls = metrics.ENGINE_CALLS.labels(fn.__name__)

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "call", False):
            return fn(*args, **kwargs)
        _inside.call = True
        started = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _inside.call = False
            seconds.inc(time.process_time() - started)
            calls.inc()

    return timed  # type: ignore[return-value]
