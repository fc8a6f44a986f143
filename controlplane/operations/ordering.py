"""A training model's ``seq_id`` order: the window a request must fall in, and moving the model
on past ``seq_id``s that will never run.

A request may run at most ``LOOPWRIGHT_SEQ_WINDOW`` ``seq_id``s ahead of the one its model runs
next: anything further is refused on arrival and takes no ``seq_id``. A request refused on arrival
still takes its (in-window) ``seq_id`` as a failed operation, which the worker steps over; a run
of ``seq_id``s that never arrived while later ones waited ``LOOPWRIGHT_SEQ_GAP_SECONDS`` is
recorded as one ``missing`` operation covering the whole range, in one statement, by the
worker's heartbeat (never its loop of operations), whatever the length of the range.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Min, OuterRef
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.fleet.models import Worker
from controlplane.training_sessions.models import Operation, TrainingModel


class OutOfWindow(DomainError):
    """A ``seq_id`` too far ahead of the model: refused, and no ``seq_id`` is taken."""

    code = "seq_id_out_of_window"


def window_check(model: TrainingModel, seq_id: int) -> None:
    """Refuse ``seq_id`` if it is more than the window ahead of ``model``'s next one."""
    if not in_window(model.next_seq, seq_id):
        raise OutOfWindow(
            f"seq_id {seq_id} is too far ahead of model {model.id}: it runs seq_id "
            f"{model.next_seq} next and takes at most {settings.SEQ_WINDOW} ahead of it "
            f"(up to {model.next_seq + settings.SEQ_WINDOW - 1}); send the requests before it first",
            field="seq_id",
        )


def in_window(next_seq: int, seq_id: int) -> bool:
    return seq_id < next_seq + settings.SEQ_WINDOW


def missing_range(op: Operation) -> tuple[int, int] | None:
    """The ``seq_id``s a ``missing`` operation stands for (first, last), both included."""
    if op.kind != Operation.Kind.MISSING or op.seq_id is None:
        return None
    return op.seq_id, int((op.payload or {}).get("last_seq_id", op.seq_id))


def _blocked(worker: Worker):
    """The worker's models that have requests waiting behind a ``seq_id`` with nothing to run
    (missing, or finished on arrival)."""
    ops = Operation.objects.filter(model=OuterRef("pk"))
    return (
        TrainingModel.objects.filter(worker=worker)
        .filter(
            Exists(ops.filter(status=Operation.Status.PENDING, seq_id__gt=OuterRef("next_seq")))
        )
        .exclude(
            Exists(
                ops.filter(
                    seq_id=OuterRef("next_seq"),
                    status__in=(Operation.Status.PENDING, Operation.Status.RUNNING),
                )
            )
        )
    )


def step_over_finished(*, worker: Worker) -> int:
    """Move each blocked model of the worker past the run of operations already finished at its
    ``next_seq`` (requests refused on arrival); how many models moved. The run is at most the
    window long: a few statements per blocked model, whatever the client sent."""
    moved = 0
    for model_id, next_seq in _blocked(worker).values_list("pk", "next_seq"):
        finished = Operation.objects.filter(
            model_id=model_id,
            seq_id__gte=next_seq,
            seq_id__lt=next_seq + settings.SEQ_WINDOW,
            status__in=Operation.FINISHED,
        ).order_by("seq_id")
        after = next_seq
        for seq in finished.values_list("seq_id", flat=True):
            if seq != after:
                break
            after += 1
        if after > next_seq:
            moved += TrainingModel.objects.filter(pk=model_id, next_seq=next_seq).update(
                next_seq=after
            )
    return moved


def settle_gaps(*, worker: Worker, gap_seconds: float | None = None) -> int:
    """Record, for each blocked model of the worker, the ``seq_id``s before its first waiting
    request that never arrived, if that request waited ``gap_seconds`` (by default
    ``LOOPWRIGHT_SEQ_GAP_SECONDS``): one ``missing`` operation for the whole range, and the
    model's ``next_seq`` moves past it. Returns how many models moved on."""
    gap_seconds = settings.SEQ_GAP_SECONDS if gap_seconds is None else gap_seconds
    moved = step_over_finished(worker=worker)
    for model in _blocked(worker):
        if _record_missing(model, worker, gap_seconds):
            moved += 1
    return moved


@transaction.atomic
def _record_missing(model: TrainingModel, worker: Worker, gap_seconds: float) -> bool:
    # Under the model's row lock, as every insert of a model's operation (submit relies on it).
    model = TrainingModel.objects.select_for_update().get(pk=model.pk)
    first = model.next_seq
    if model.worker_id != worker.pk:
        return False  # it moved to another worker meanwhile
    if Operation.objects.filter(model=model, seq_id=first).exists():
        return False  # it arrived after all (or was refused: stepped over next time)
    later = model.operations.filter(seq_id__gt=first)
    oldest = later.filter(status=Operation.Status.PENDING).aggregate(t=Min("created_at"))["t"]
    if oldest is None:
        return False
    if model.placed_at is not None:
        oldest = max(oldest, model.placed_at)  # time spent waiting for a worker is no gap
    if (timezone.now() - oldest).total_seconds() < gap_seconds:
        return False
    last = later.aggregate(seq=Min("seq_id"))["seq"] - 1  # up to the next one that arrived
    what = f"seq_id {first}" if first == last else f"seq_ids {first} to {last}"
    Operation.objects.create(
        tenant_id=model.tenant_id,
        session_id=model.session_id,
        model=model,
        worker_id=model.worker_id,
        seq_id=first,
        kind=Operation.Kind.MISSING,
        payload={"first_seq_id": first, "last_seq_id": last},
        payload_digest="",
        status=Operation.Status.FAILED,
        error=f"{what} never arrived; later requests ran without them",
        error_category="user",
        finished_at=timezone.now(),
    )
    TrainingModel.objects.filter(pk=model.pk, next_seq=first).update(next_seq=last + 1)
    return True
