"""The drain: passes (``passes.Pass``) until nothing on this worker is runnable, one drain at
a time (the Celery task and the wake listener both ask for one). Idle at the end, it takes the
snapshots due by time and brings back the models moved here (``restores_due``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from controlplane import worker_port as port

from .lease import Lease
from .passes import Pass, PassContext
from .recording import Recorder
from .restoring import Restorer
from .snapshots import Snapshots


class Drainer:
    def __init__(
        self,
        lease: Lease,
        recorder: Recorder,
        restorer: Restorer,
        snapshots: Snapshots,
        *,
        context: Callable[[], PassContext],
        reset: Callable[[], None],
    ) -> None:
        """``context``: what the next pass sees of the worker; ``reset``: the lease was taken
        away, start over empty (called holding the drain lock)."""
        self.lease = lease
        self.recorder = recorder
        self.restorer = restorer
        self.snapshots = snapshots
        self.context = context
        self.reset = reset
        self.restores_due = threading.Event()  # models moved here wait to be restored
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def locked(self, *, blocking: bool = True, timeout: float | None = None) -> Iterator[bool]:
        """The drain lock, as a context that says whether it was taken."""
        if timeout is not None:
            held = self._lock.acquire(timeout=timeout)
        else:
            held = self._lock.acquire(blocking=blocking)
        try:
            yield held
        finally:
            if held:
                self._lock.release()

    def drain(self) -> int:
        """Run everything runnable; returns how many operations ran."""
        with self._lock:
            if self.lease.stop.is_set():
                return 0
            try:
                return self._drain()
            except port.Fenced:
                self.reset()
                return 0

    def _drain(self) -> int:
        ran = 0
        while True:
            if self.lease.fenced.is_set():
                self.reset()
            self.recorder.requeue_unrecorded()
            progressed, idle = Pass(self.context()).run()
            if not progressed and not idle:
                # Nothing runnable: step over requests refused on arrival, then look again
                # (seq_ids that never arrived are settled by the heartbeat, not here).
                progressed = port.step_over_finished(worker=self.lease.worker)
            ran += progressed
            if self.lease.stop.is_set():
                return ran
            if idle or not progressed:
                for model_id in self.snapshots.due_by_time():  # idle: a good moment
                    self.snapshots.take(model_id, self.lease.fence)
                if self.restores_due.is_set():  # and to bring moved models back at once
                    self.restores_due.clear()
                    for model_id in self.restorer.due():
                        self.restorer.restore(model_id)
                return ran
