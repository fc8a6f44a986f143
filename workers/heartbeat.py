"""The heartbeat: every fifth of the lease, on a thread of its own, renew this worker's lease
(or, fenced, start over empty); declare dead any worker silent past its lease; keep its part in
a replica group; take waiting models; settle seq_ids that never arrived; and wake the drain for
work, a snapshot due by time or models to restore. It never waits for the drain."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings as django_settings
from django.db import close_old_connections

from controlplane import worker_port as port

from .draining import Drainer
from .group_member import GroupMember
from .lease import Lease
from .recording import Recorder
from .restoring import Restorer
from .snapshots import Snapshots

log = logging.getLogger("loopwright.worker")


class Heartbeat:
    def __init__(
        self,
        lease: Lease,
        drainer: Drainer,
        recorder: Recorder,
        restorer: Restorer,
        snapshots: Snapshots,
        group: GroupMember,
        *,
        name: str,
        reset: Callable[[], None],
        poke: Callable[[], None],
    ) -> None:
        """``reset``: the lease was taken away, start over empty (called holding the drain
        lock); ``poke``: have the drain look for work now."""
        self.lease = lease
        self.drainer = drainer
        self.recorder = recorder
        self.restorer = restorer
        self.snapshots = snapshots
        self.group = group
        self.name = name
        self.reset = reset
        self.poke = poke

    def start(self) -> None:
        threading.Thread(target=self._run, name="worker-heartbeat", daemon=True).start()

    def _run(self) -> None:
        every = django_settings.WORKER_LEASE_SECONDS / 5
        while not self.lease.stop.wait(every):
            try:
                self.beat()
            except Exception:  # a database hiccup must not kill the heartbeat
                log.exception("heartbeat failed")
            finally:
                self.lease.beat_at = time.monotonic()
                close_old_connections()

    def beat(self) -> None:
        """One heartbeat: renew the lease (or, fenced, start over); declare dead any worker
        silent past its lease; take waiting models (room may have freed); record seq_ids that
        never arrived; give a lost nudge or a snapshot due by time another look."""
        if not self.lease.renew():
            with self.drainer.locked(blocking=False) as held:
                if held:
                    self.reset()
            return
        port.declare_dead(by=f"worker {self.name}")
        self.group.check()  # join, leave or keep alive its replica group
        if self.recorder.has_unrecorded:
            with self.drainer.locked(blocking=False) as held:
                if held:  # the database answers again: what it could not record runs again
                    self.recorder.requeue_unrecorded()
        self.lease.place_waiting()
        port.settle_gaps(worker=self.lease.worker)  # one row per gap, however long
        if self.restorer.due():
            self.drainer.restores_due.set()
        waiting = port.has_waiting_work(worker=self.lease.worker)
        if waiting or self.snapshots.due_by_time() or self.drainer.restores_due.is_set():
            self.poke()
