"""Recording what became of each operation a worker ran, fenced by its lease.

An operation that ran and could not be recorded (the database went away) is remembered here:
its model's state on the host no longer matches the database, so the model is dropped (it is
restored before it runs anything again) and the operation is put back to pending once the
database answers (``requeue_unrecorded``).
"""

from __future__ import annotations

import logging

from django.db import DatabaseError

from controlplane import worker_port as port

from .executor import Outcome
from .lease import Lease
from .snapshots import Snapshots
from .telemetry import operation_recorded

log = logging.getLogger("loopwright.worker")


class Recorder:
    """Records outcomes under the worker's current lease and keeps the snapshot policy
    (``snapshots``) in step with what was recorded."""

    def __init__(self, snapshots: Snapshots, lease: Lease) -> None:
        self.snapshots = snapshots
        self.lease = lease
        self._unrecorded: set[str] = set()  # operations that ran but could not be recorded

    @property
    def has_unrecorded(self) -> bool:
        return bool(self._unrecorded)

    def finish(self, op, outcome: Outcome) -> bool | None:
        """Record what became of ``op``; whether other work waited on the worker then (None:
        not known)."""
        try:
            if outcome.retry:  # not run: pending again, for a later pass
                port.requeue(request_id=op.pk, fence=self.lease.fence, home=outcome.home)
                operation_recorded(op, "retried")
                return None
            if outcome.ok:
                waiting = port.complete(op, outcome.result or {}, self.lease.fence)
                operation_recorded(op, "done")
                # after the commit: a snapshot never holds a state the database has not
                self.snapshots.ran(op, outcome.result or {}, self.lease.fence)
                return waiting
            port.fail(op, outcome.error or "failed", outcome.category, self.lease.fence)
            operation_recorded(op, "failed")
            return None
        except port.ClaimLost:
            # The database lost the claim (it crashed before the claim reached its disk): the
            # operation is pending again, and runs again after the model is restored.
            log.warning("%s lost its claim; it runs again", op.pk)
            self.drop(op)
            return None
        except DatabaseError:
            # The engine ran it, the database did not take the result: this host's state of
            # the model no longer matches the database. The model is restored before it runs
            # anything again; the operation runs again once the database answers.
            self.unrecorded(op)
            raise

    def drop(self, op) -> None:
        """``op``'s model's state on the host no longer counts: forget it (it is restored from
        its recovery point before it runs anything again)."""
        if op.model_id is not None:
            self.snapshots.forget(op.model_id)
            host = self.snapshots.host
            if host.has_adapter(op.model_id):
                host.remove_adapter(op.model_id)

    def unrecorded(self, op) -> None:
        """``op`` ran (its model's state here took it), the database did not record it."""
        self.drop(op)
        self._unrecorded.add(op.pk)

    def put_back(self, request_ids) -> None:
        """Claimed operations not recorded: pending again once the database answers."""
        self._unrecorded.update(request_ids)

    def requeue_unrecorded(self) -> None:
        for request_id in sorted(self._unrecorded):
            port.requeue(request_id=request_id, fence=self.lease.fence)
            self._unrecorded.discard(request_id)

    def forget(self) -> None:
        """The lease was lost: what was not recorded went with it."""
        self._unrecorded.clear()
