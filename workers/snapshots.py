"""The service's own snapshots of the training models on this worker, so a model lost with its
worker has a recent recovery point and a short replay.

A model is due every ``every_steps`` optimizer steps or ``every_seconds`` after its first
change since its last point, whichever comes first. The draining thread captures the state
between two operations (copies on the CPU, milliseconds); a background thread writes it
(sealed with the tenant's KMS key, into the session's storage) and records it as the model's
recovery point, fenced by this worker's lease, so training does not wait for the disk.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import connections

from controlplane import worker_port as port
from controlplane.worker_port import Fence

from . import checkpoint_storage as stored
from .engine import snapshots as engine_snapshots
from .engine.host import ModelHost
from .sealing import Vault

log = logging.getLogger("loopwright.worker")

CHANGES_STATE = frozenset({"create_model", "forward_backward", "optim_step", "load_weights"})


@dataclass
class _Tracked:
    tenant_id: object
    seq: int  # the state held is the one after this operation
    steps: int = 0  # optimizer steps since the recovery point
    since: float | None = None  # when it first changed since the point (None: it has not)


@dataclass
class _Job:
    model_id: str
    tenant_id: object
    seq: int
    snapshot: engine_snapshots.Snapshot
    fence: Fence
    done: threading.Event = field(default_factory=threading.Event)


class Snapshots:
    """Snapshot policy and writer for one worker process."""

    def __init__(
        self,
        host: ModelHost,
        vault: Callable[[object], Vault],
        *,
        every_steps: int,
        every_seconds: float,
    ) -> None:
        self.host = host
        self.vault = vault
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self._tracked: dict[str, _Tracked] = {}
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="snapshots", daemon=True)
        self._writer.start()
        self.written = 0

    # -- policy (the draining thread) ----------------------------------------------------------
    def ran(self, op, result: dict, fence: Fence) -> None:
        """After ``op`` completed: track the model's state, and snapshot it if it is due."""
        if op.model_id is None:
            return
        if op.kind == "save_weights" and not result.get("_pending_gradients", True):
            # the save is the recovery point now
            self._tracked[op.model_id] = _Tracked(op.tenant_id, seq=op.seq_id)
            return
        if op.kind not in CHANGES_STATE:
            return
        tracked = self._tracked.setdefault(op.model_id, _Tracked(op.tenant_id, seq=op.seq_id))
        tracked.seq = op.seq_id
        tracked.steps += op.kind == "optim_step"
        if tracked.since is None:
            tracked.since = time.monotonic()
        if self._due(tracked):
            self.take(op.model_id, fence)

    def restored(
        self, model_id: str, *, tenant_id: object, last_seq: int, optimizer_steps: int
    ) -> None:
        """A model restored here: what it replayed counts as changes since its point."""
        tracked = _Tracked(tenant_id, seq=last_seq, steps=optimizer_steps)
        if last_seq >= 0 and optimizer_steps:
            tracked.since = time.monotonic()
        self._tracked[model_id] = tracked

    def _due(self, tracked: _Tracked) -> bool:
        if tracked.since is None:
            return False
        if self.every_steps and tracked.steps >= self.every_steps:
            return True
        waited = time.monotonic() - tracked.since
        return bool(self.every_seconds) and waited >= self.every_seconds

    def due_by_time(self) -> list[str]:
        """Models whose time trigger has passed (the heartbeat asks; a drain pass takes them)."""
        return [m for m, t in self._tracked.items() if self._due(t)]

    def dirty(self) -> list[str]:
        """Models changed since their recovery point (a stopping worker snapshots them all)."""
        return [m for m, t in self._tracked.items() if t.since is not None]

    def take(self, model_id: str, fence: Fence) -> _Job | None:
        """Capture the model's state now and queue it for writing; None if it is not here."""
        tracked = self._tracked.get(model_id)
        if tracked is None or not self.host.has_adapter(model_id):
            return None
        snapshot = self.host.capture(model_id)
        job = _Job(model_id, tracked.tenant_id, tracked.seq, snapshot, fence)
        tracked.steps, tracked.since = 0, None
        self._jobs.put(job)
        return job

    def evicted(
        self, model_id: str, snapshot: engine_snapshots.Snapshot, fence: Fence
    ) -> _Job | None:
        """An adapter spilled to this worker's disk to make room: its state changed since its
        recovery point goes to storage too (the spill dies with the worker)."""
        tracked = self._tracked.get(model_id)
        if tracked is None or tracked.since is None:
            return None
        job = _Job(model_id, tracked.tenant_id, tracked.seq, snapshot, fence)
        tracked.steps, tracked.since = 0, None
        self._jobs.put(job)
        return job

    def forget(self, model_id: str | None = None) -> None:
        """Stop tracking ``model_id`` (None: every model; the worker starts empty)."""
        if model_id is None:
            self._tracked.clear()
        else:
            self._tracked.pop(model_id, None)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued snapshot is written (or ``timeout`` passes)."""
        marker = threading.Event()
        self._jobs.put(_Job("", None, -1, None, None, marker))  # type: ignore[arg-type]
        return marker.wait(timeout)

    # -- writing (the background thread) ---------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if job.snapshot is not None:
                    self._write(job)
            except Exception:
                log.exception("snapshot of %s after seq_id %s failed", job.model_id, job.seq)
                tracked = self._tracked.get(job.model_id)
                if tracked is not None and tracked.since is None:
                    tracked.since = time.monotonic()  # try again when the time trigger says
            finally:
                job.done.set()
                connections.close_all()  # this thread's own: snapshots are minutes apart

    def _write(self, job: _Job) -> None:
        target = port.snapshot_target(model_id=job.model_id, seq=job.seq)
        vault = self.vault(job.tenant_id)
        sealing, uri = target["sealing"], target["storage_uri"]
        with vault.scratch() as scratch:
            engine_snapshots.write(job.snapshot, scratch / "state")
            vault.seal_folder(scratch / "state", scratch / "sealed", sealing)
            manifest = stored.upload(vault, scratch / "sealed", uri, uri)
        point = {
            "seq": job.seq,
            "kind": port.SNAPSHOT,
            "storage_uri": uri,
            "storage_path": target["storage_path"],
            "manifest": manifest,
            "sealing": sealing,
            "at": datetime.now(UTC).isoformat(),
        }
        if port.snapshot_record(model_id=job.model_id, fence=job.fence, point=point):
            self.written += 1
            log.info("snapshot of %s after seq_id %s recorded", job.model_id, job.seq)
        else:  # the model moved on (a newer point, another worker, its end): not needed
            port.snapshot_delete(point)
