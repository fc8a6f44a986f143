"""Every status change of an operation, and where an operation belongs, in one module.

::

    pending ──CLAIM──▶ running ──COMPLETE──▶ done
      ▲  │  ▲            │  │
      │  │  └──REQUEUE───┘  └──FAIL──▶ failed
      │  └──────FAIL─────────────────▶ failed
      └──RELEASE (pending or running; its worker lost or stopped: no worker until placed)

An operation that waits (pending) may also **move**: to its model's worker when placement
gives the model one, with its sampler when the sampler moves, or home again when it was queued
on a worker that had just been declared dead (``rehome_strays``). Nothing else changes an
operation's ``status`` or ``worker``: the worker's claims and completions (``operations.claim``,
``operations.complete``), failover and placement (``services.failover``, ``services.placement``)
all go through the transitions here, the one-statement paths of PostgreSQL through their SQL
(``Transition.sql_set`` and ``sql_from``).

**Where an operation belongs** (``home_worker_id``), written only here: a training model's
operation runs on the model's worker; a sample runs where its weights are: for a sampler of a
live model (``live_model``), on that model's worker, whose adapter it samples from, whatever its
sampler row says; for any other sampler, on the sampler's worker. A sampler's row can lag its
live model (one created as the model moved keeps the old worker): its requests still go to the
model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.fleet.services import Fence

from .models import Operation, SamplingSession, TrainingModel

PENDING, RUNNING = Operation.Status.PENDING, Operation.Status.RUNNING
DONE, FAILED = Operation.Status.DONE, Operation.Status.FAILED


@dataclass(frozen=True)
class Transition:
    """A change of status: from any of ``sources`` to ``target``."""

    name: str
    sources: tuple[str, ...]
    target: str

    def sql_from(self, column: str = "status") -> tuple[str, list]:
        """The condition that the row is in one of the sources (SQL and parameters)."""
        marks = ", ".join(["%s"] * len(self.sources))
        return f"{column} IN ({marks})", list(self.sources)

    def sql_set(self, **fields) -> tuple[str, list]:
        """The SET list of the transition: the status and ``fields`` (SQL and parameters)."""
        names = ["status", *fields]
        return ", ".join(f"{n} = %s" for n in names), [self.target, *fields.values()]

    def rows(self, queryset: QuerySet) -> QuerySet:
        """The rows of ``queryset`` the transition applies to."""
        return queryset.filter(status__in=self.sources)

    def apply(self, queryset: QuerySet, **fields) -> int:
        """Take the rows of ``queryset`` still in a source status to the target (with
        ``fields``); returns how many changed."""
        return self.rows(queryset).update(status=self.target, **fields)


CLAIM = Transition("claim", (PENDING,), RUNNING)
REQUEUE = Transition("requeue", (RUNNING,), PENDING)
COMPLETE = Transition("complete", (RUNNING,), DONE)
FAIL = Transition("fail", (PENDING, RUNNING), FAILED)
RELEASE = Transition("release", (PENDING, RUNNING), PENDING)
TRANSITIONS = (CLAIM, REQUEUE, COMPLETE, FAIL, RELEASE)


def allowed(source: str, target: str) -> bool:
    """Whether an operation may go from ``source`` to ``target``."""
    return any(source in t.sources and t.target == target for t in TRANSITIONS)


# -- where an operation belongs --------------------------------------------------------------
def sampler_home_id(sampler: SamplingSession) -> int | None:
    """The worker a sampler's requests run on: its live model's (None while that model waits
    for one), else its own."""
    if sampler.live_model_id is not None:
        return (
            TrainingModel.objects.filter(pk=sampler.live_model_id)
            .values_list("worker", flat=True)
            .first()
        )
    return sampler.worker_id


def home_worker_id(op: Operation) -> int | None:
    """The worker ``op`` belongs on now (None: its model or sampler waits for one)."""
    if op.model_id is not None:
        return TrainingModel.objects.filter(pk=op.model_id).values_list("worker", flat=True).first()
    return sampler_home_id(SamplingSession.objects.get(pk=op.sampling_session_id))


# -- the worker's transitions ----------------------------------------------------------------
def claim(op: Operation, fence: Fence) -> bool:
    """Pending → running, by the fenced worker that holds it (the ORM path; the one-statement
    claims use ``CLAIM.sql_set``). Updates ``op``; False: someone else took or moved it."""
    now = timezone.now()
    won = CLAIM.apply(
        Operation.objects.filter(fence.q(), pk=op.pk, worker_id=fence.worker_id), started_at=now
    )
    if won:
        op.status, op.started_at = CLAIM.target, now
    return bool(won)


def requeue(request_id: str, fence: Fence, *, home: bool = False) -> bool:
    """Running → pending: claimed by the fenced worker but not to be recorded now; ``home``: on
    the worker it belongs on now (``home_worker_id``). The caller holds the fence's lock.
    False: it was recorded after all, or the worker no longer holds it."""
    fields: dict = {"started_at": None}
    if home:
        fields["worker_id"] = home_worker_id(Operation.objects.get(pk=request_id))
    held = Operation.objects.filter(pk=request_id, worker_id=fence.worker_id)
    return bool(REQUEUE.apply(held, **fields))


def complete(op: Operation, result: dict, now: datetime, fence: Fence) -> bool:
    """Running → done with ``result``, by the fenced worker (the ORM path; the one-statement
    completion uses ``COMPLETE.sql_set``). Updates ``op``; False: it was not running there."""
    held = Operation.objects.filter(pk=op.pk, worker_id=fence.worker_id)
    if not COMPLETE.apply(held, result=result, finished_at=now):
        return False
    op.status, op.result, op.finished_at = COMPLETE.target, result, now
    return True


def fail(ops: QuerySet, error: str, category: str, *, detail: dict | None = None, now=None) -> int:
    """Pending or running → failed, with the error people read and its category (``user`` or
    ``server``); ``detail``: what the failure answer carries besides. Returns how many."""
    return FAIL.apply(
        ops,
        error=error[:10000],
        error_category=category,
        finished_at=now or timezone.now(),
        result=detail,
    )


# -- failover and placement ------------------------------------------------------------------
def release(ops: QuerySet) -> int:
    """Pending or running → pending, on no worker: their worker was lost or stopped (placement
    gives them their model's next one). Returns how many."""
    return RELEASE.apply(ops, started_at=None, worker=None)


def move_waiting(ops: QuerySet, worker: Worker | None) -> int:
    """Pending operations of ``ops`` go to ``worker`` (None: they wait with their model or
    sampler). Returns how many."""
    return ops.filter(status=PENDING).update(worker=worker)


def place_with_model(model: TrainingModel, worker: Worker) -> None:
    """``model`` was placed on ``worker``: its operations queued while it waited for one (those
    refused on arrival, finished already, too: they are the worker's to step over), the
    samplers of its live weights and their waiting requests go there with it."""
    model.operations.filter(worker__isnull=True).update(worker=worker)
    samplers = SamplingSession.objects.filter(live_model=model)
    samplers.update(worker=worker)
    move_waiting(
        Operation.objects.filter(sampling_session__in=samplers, worker__isnull=True), worker
    )


def move_with_sampler(sampler: SamplingSession, worker: Worker | None) -> None:
    """The sampler moves to ``worker`` (None: it waits for one), its waiting requests with it."""
    sampler.worker = worker
    sampler.save(update_fields=["worker"])
    move_waiting(Operation.objects.filter(sampling_session=sampler), worker)


def rehome_strays(gone: Iterable[str]) -> set[int]:
    """Requests queued on a worker after it was declared dead or stopped (``gone``: those
    states; their submit read the old worker just before the move): each goes where it belongs
    now (``home_worker_id``), and a sampler row left on such a worker follows its live model.
    Returns the workers that got requests."""
    woken: set[int] = set()
    stray = Operation.objects.filter(status=PENDING, worker__state__in=tuple(gone))
    for op in stray.only("pk", "worker_id", "model_id", "sampling_session_id"):
        home = home_worker_id(op)
        if op.sampling_session_id is not None:
            SamplingSession.objects.filter(
                pk=op.sampling_session_id, worker_id=op.worker_id, live_model__isnull=False
            ).update(worker_id=home)
        if home == op.worker_id:
            continue  # a sampler of no live model, on its lost worker: it moves with its sampler
        moved = Operation.objects.filter(pk=op.pk, worker_id=op.worker_id, status=PENDING)
        if moved.update(worker_id=home) and home is not None:
            woken.add(home)
    return woken
