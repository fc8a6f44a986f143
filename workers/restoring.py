"""Bringing a model this host does not hold onto it before it runs anything: one moved here
from a lost worker, or one whose result could not be recorded (``recovery.restore_model``:
its recovery point, then a replay of what ran since)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from django.db import DatabaseError

from controlplane import worker_port as port

from .engine.interface import Engine
from .executor import Outcome, classify
from .lease import Lease
from .recovery import ReplayDiverged, restore_model
from .replicated_host import GroupNotReady
from .sealing import Vault
from .snapshots import Snapshots

log = logging.getLogger("loopwright.worker")

RESTORE_ATTEMPTS = 3  # a restore that fails for a passing reason (storage away) is tried again
# kinds that run without the model's state on the host
STATELESS_KINDS = frozenset({"create_model", "unload_model"})


class Restorer:
    def __init__(
        self,
        lease: Lease,
        engine: Engine,
        snapshots: Snapshots,
        *,
        worker_name: str,
        vault: Callable[[object], Vault],
        threads: Callable[[str, dict], AbstractContextManager[object]],
    ) -> None:
        self.lease = lease
        self.engine = engine
        self.snapshots = snapshots
        self.worker_name = worker_name
        self.vault = vault
        self.threads = threads
        self._failures: dict[str, int] = {}

    def due(self) -> list[str]:
        """Models moved here from a lost worker that this host does not hold yet."""
        moved = port.models_to_restore(fence=self.lease.fence)
        return [m for m in moved if not self.engine.has_adapter(m)]

    def ready(self, op) -> bool:
        """Whether ``op`` runs without a restore first (its model is here, or it needs none)."""
        return op.kind in STATELESS_KINDS or self.engine.has_adapter(op.model_id)

    def held(self, op) -> Outcome | None:
        """Bring ``op``'s model onto the host if it needs it and is not here (None: ready)."""
        if not self.ready(op):
            return self.restore(op.model_id)
        return None

    def restore(self, model_id: str) -> Outcome | None:
        """Bring ``model_id`` back onto the host (None: done). A model that cannot be restored
        fails, saying where its user can resume; a passing failure (storage or the key service
        away) is tried again a few times first, the operation waiting meanwhile."""
        try:
            done = restore_model(
                self.engine,
                model_id,
                fence=self.lease.fence,
                worker_name=self.worker_name,
                vault=self.vault,
                threads=self.threads,
            )
        except port.NotHere:
            return Outcome(error=f"model {model_id} is on another worker", retry=True, home=True)
        except GroupNotReady as exc:
            return Outcome(error=str(exc), retry=True)
        except DatabaseError:
            raise
        except Exception as exc:
            outcome = classify(exc)
            tries = self._failures.get(model_id, 0) + 1
            self._failures[model_id] = tries
            log.exception("restoring %s failed (attempt %d)", model_id, tries)
            passing = outcome.category == "server" and not isinstance(exc, ReplayDiverged)
            if passing and tries < RESTORE_ATTEMPTS:
                return Outcome(error=f"restoring model {model_id}: {exc}", retry=True)
            return Outcome(
                error=port.restore_failed(
                    model_id=model_id, worker_name=self.worker_name, why=outcome.error or str(exc)
                ),
                category="server",
            )
        self._failures.pop(model_id, None)
        self.snapshots.restored(
            model_id,
            tenant_id=done.tenant_id,
            last_seq=done.last_seq,
            optimizer_steps=done.optimizer_steps,
        )
        if done.replayed:  # the next loss of this model need not replay all that again
            self.snapshots.take(model_id, self.lease.fence)
        return None

    def forget(self) -> None:
        """The lease was lost: failed attempts start over."""
        self._failures.clear()
