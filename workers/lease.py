"""This worker's lease in the fleet: its registration under a generation, renewed by the
heartbeat; every claim and completion is fenced by it (``fence``). A worker whose lease was
taken away (declared dead after a long pause or a partition) is ``fenced``: it drops what it
holds and registers anew, empty.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings as django_settings

from controlplane import worker_port as port

log = logging.getLogger("loopwright.worker")


class Lease:
    def __init__(self, start: Callable[[], port.Registration], base_model: str) -> None:
        """``start``: registers this worker under a new generation (``port.worker_start``)."""
        self._start = start
        self.base_model = base_model
        self.stop = threading.Event()  # asked to stop: the operation running now is the last
        self.fenced = threading.Event()  # the lease was taken away: start over, empty
        self.renewed_at = self.beat_at = time.monotonic()  # for the probes (telemetry)

    def register(self) -> None:
        """Register under a new generation (declaring a previous process of this name dead if
        it still held the lease); then take models and samplers waiting for a worker."""
        reg = self._start()
        self.worker = reg.worker
        self.fence = port.Fence(reg.worker.pk, reg.generation)
        self.renewed_at = time.monotonic()
        self.fenced.clear()
        self.place_waiting()

    def renew(self) -> bool:
        """Renew the lease; False: it was taken away (``fenced`` is set)."""
        started = time.monotonic()
        if not port.lease_renew(self.fence):
            self.fenced.set()
            return False
        self.renewed_at = started  # renewed as of the moment it was asked
        return True

    def held(self) -> bool:
        """Whether this worker takes work now: its lease renewed within its length, not taken
        away, not stopping (the readiness probe)."""
        fresh = time.monotonic() - self.renewed_at < django_settings.WORKER_LEASE_SECONDS
        return fresh and not self.fenced.is_set() and not self.stop.is_set()

    def heartbeat_age(self) -> float:
        """Seconds since the heartbeat thread last finished a beat (the liveness probe)."""
        return time.monotonic() - self.beat_at

    def place_waiting(self) -> None:
        placed = port.take_waiting(base_model=self.base_model)
        if placed:
            log.info("took %d models and samplers that waited for a worker", len(placed))
