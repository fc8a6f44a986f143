"""The worker's side: find runnable operations, claim them, and complete them in one transaction.

A training model's operation is runnable when its ``seq_id`` equals the model's ``next_seq``;
claiming is a conditional UPDATE (pending → running), so a redelivered nudge never runs an
operation twice. Completing stores the result, advances ``next_seq`` and applies the
operation's effects (model ready, checkpoint recorded, sampler opened, model unloaded) at once.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from controlplane import row_mapper
from controlplane.fleet.models import Worker
from controlplane.fleet.services import Fence
from controlplane.metering.rollup import usage_write_ctes
from controlplane.metering.services import usage_record_for, usage_rows_for
from controlplane.registry.services import package_register
from controlplane.storage import manifest_digest

from ..models import Checkpoint, Operation, Recovery, SamplingSession, Session, TrainingModel
from . import recovery
from .sessions import session_fail_if_unstarted, session_finish_if_unloaded

log = logging.getLogger(__name__)


def next_training_ops(*, worker: Worker) -> list[Operation]:
    """For each model on the worker, its next operation in seq order, if it has arrived."""
    return list(
        Operation.objects.filter(
            worker=worker,
            status=Operation.Status.PENDING,
            model__isnull=False,
            seq_id=F("model__next_seq"),
        )
        .select_related("model")
        .order_by("created_at")
    )


def claim_next_training(*, fence: Fence, skip: Collection[str] = ()) -> Operation | None:
    """The oldest runnable training operation on the worker (its model's ``next_seq``), of a
    model not in ``skip``, claimed under ``fence``; None when there is none (or the fence no
    longer holds). On PostgreSQL the look and the claim are one statement."""
    if connection.vendor == "postgresql":
        return _claim_next_in_one_statement(fence, skip)
    for op in next_training_ops(worker=Worker(pk=fence.worker_id)):
        if op.model_id not in skip and claim(op, fence):
            return op
    return None


def _claim_next_in_one_statement(fence: Fence, skip: Collection[str]) -> Operation | None:
    # The pick locks its row and re-checks it is still pending (another transaction may have
    # just failed it, say a stop), going on to the next one if not: nothing runnable is missed.
    ops, models = Operation._meta.db_table, TrainingModel._meta.db_table
    skipping = ""
    if skip:
        skipping = f"AND o.model_id NOT IN ({', '.join(['%s'] * len(skip))})"
    now = timezone.now()
    fenced, fence_params = fence.sql()
    sql = f"""
        UPDATE {ops} SET status = %s, started_at = %s
        WHERE id = (
            SELECT o.id FROM {ops} o JOIN {models} m ON m.id = o.model_id
            WHERE o.worker_id = %s AND o.status = %s AND o.seq_id = m.next_seq {skipping}
            ORDER BY o.created_at LIMIT 1
            FOR UPDATE OF o SKIP LOCKED
        ) AND status = %s AND worker_id = %s AND {fenced}
        RETURNING {_returned()}
    """
    pending, worker_id = Operation.Status.PENDING, fence.worker_id
    params = [Operation.Status.RUNNING, now, worker_id, pending, *skip, pending, worker_id]
    claimed = _claimed(sql, params + fence_params)
    return claimed[0] if claimed else None


def _returned(alias: str | None = None) -> str:
    """What a claim's RETURNING gives back: every column of an operation row (under the table
    alias ``alias``), after a call that makes the claim's commit not wait for the disk
    (``_claimed``)."""
    unflushed = "set_config('synchronous_commit', 'off', true)"
    return f"{unflushed}, {row_mapper.select_list(Operation, alias)}"


def _claimed(sql: str, params: list) -> list[Operation]:
    """The rows a claiming ``UPDATE … RETURNING`` took, committed without waiting for the disk.

    The worker claims outside any transaction: the statement commits by itself, in one round
    trip. Its RETURNING sets ``synchronous_commit`` off for that transaction alone (``set_config``
    local to it, evaluated before the commit, and only when a row was claimed: otherwise nothing
    is written and there is nothing to flush). Inside a caller's transaction it is that
    transaction's commit that does not wait.
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row_mapper.load(Operation, row[1:]) for row in cursor.fetchall()]


def pending_samples(*, worker: Worker, limit: int) -> list[Operation]:
    return list(
        Operation.objects.filter(
            worker=worker, status=Operation.Status.PENDING, kind=Operation.Kind.SAMPLE
        ).order_by("created_at")[:limit]
    )


def claim_samples(*, fence: Fence, limit: int) -> list[Operation]:
    """Up to ``limit`` of the worker's pending samples, oldest first, claimed under ``fence``
    (on PostgreSQL in one statement)."""
    if connection.vendor != "postgresql":
        worker = Worker(pk=fence.worker_id)
        return [op for op in pending_samples(worker=worker, limit=limit) if claim(op, fence)]
    ops = Operation._meta.db_table
    fenced, fence_params = fence.sql()
    # the pick is materialized: evaluated once, so never more than ``limit`` rows
    sql = f"""
        WITH picked AS MATERIALIZED (
            SELECT id FROM {ops} WHERE worker_id = %s AND status = %s AND kind = %s
            ORDER BY created_at LIMIT %s
            FOR UPDATE SKIP LOCKED
        )
        UPDATE {ops} o SET status = %s, started_at = %s FROM picked
        WHERE o.id = picked.id AND o.status = %s AND o.worker_id = %s AND {fenced}
        RETURNING {_returned("o")}
    """
    pending = Operation.Status.PENDING
    params = [
        fence.worker_id,
        pending,
        Operation.Kind.SAMPLE,
        limit,
        Operation.Status.RUNNING,
        timezone.now(),
        pending,
        fence.worker_id,
        *fence_params,
    ]
    return sorted(_claimed(sql, params), key=lambda op: op.created_at)


def has_waiting_work(*, worker: Worker, older_than_seconds: float | None = 2.0) -> bool:
    """Whether operations wait on the worker (those older than ``older_than_seconds``; None:
    any)."""
    waiting = Operation.objects.filter(worker=worker, status=Operation.Status.PENDING)
    if older_than_seconds is not None:
        cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
        waiting = waiting.filter(created_at__lt=cutoff)
    return waiting.exists()


@contextmanager
def _unflushed() -> Iterator[None]:
    """A transaction whose commit does not wait for the disk: for claims. The completion's
    durable commit flushes the claim with it; should the database lose a claim in a crash
    before that, the completion fails too (``ClaimLost``) and the worker restores the model
    before it runs the operation again, rather than apply it twice to the adapter."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def claim(op: Operation, fence: Fence) -> bool:
    now = timezone.now()
    with _unflushed():
        won = Operation.objects.filter(
            fence.q(), pk=op.pk, status=Operation.Status.PENDING, worker_id=fence.worker_id
        ).update(status=Operation.Status.RUNNING, started_at=now)
    if won:
        op.status, op.started_at = Operation.Status.RUNNING, now
    return bool(won)


# kinds whose completion changes nothing but the operation, its model's next_seq and usage
_PLAIN_KINDS = frozenset(
    {
        Operation.Kind.FORWARD,
        Operation.Kind.FORWARD_BACKWARD,
        Operation.Kind.OPTIM_STEP,
        Operation.Kind.LOAD_WEIGHTS,
        Operation.Kind.SAMPLE,
    }
)


def complete(op: Operation, result: dict, fence: Fence) -> bool | None:
    """Record the result, advance the model's sequence, apply the operation's effects and its
    usage, all at once (the trigger on the table then wakes whoever waits for it), provided
    ``fence`` still holds (else ``Fenced``: the worker was declared dead meanwhile).

    Returns whether other operations waited on the worker as the completion was written (one
    submitted meanwhile wakes the worker by itself), or None where it did not look."""
    now = timezone.now()
    if connection.vendor == "postgresql" and op.kind in _PLAIN_KINDS:
        return _complete_in_one_statement(op, result, now, fence)
    _complete(op, result, now, fence)
    return None


@transaction.atomic
def _complete(op: Operation, result: dict, now: datetime, fence: Fence) -> None:
    if not fence.lock():
        raise Fenced(f"operation {op.pk}: this worker's lease was taken away; result dropped")
    updated = Operation.objects.filter(
        pk=op.pk, status=Operation.Status.RUNNING, worker_id=fence.worker_id
    ).update(status=Operation.Status.DONE, result=result, finished_at=now)
    if not updated:
        _not_running(op, fence)
        return
    op.status, op.result, op.finished_at = Operation.Status.DONE, result, now
    _advance(op)
    _apply_effects(op, result)
    usage_record_for(op)  # the tokens it processed, committed with its completion


def _complete_in_one_statement(op: Operation, result: dict, now: datetime, fence: Fence) -> bool:
    """The same as ``_complete`` for a kind without effects, as one statement (so one round
    trip, atomic by itself): the result, next_seq and the usage rows with their day's totals;
    it also looks for other pending operations on the worker."""
    before = op.status, op.result, op.finished_at
    op.status, op.result, op.finished_at = Operation.Status.DONE, result, now
    usage_ctes, usage_params = usage_write_ctes(usage_rows_for(op), gate="done")
    ops, models = Operation._meta.db_table, TrainingModel._meta.db_table
    fenced, fence_params = fence.sql()
    sql = f"""
        WITH done AS (
            UPDATE {ops} SET status = %s, result = %s, finished_at = %s
            WHERE id = %s AND status = %s AND worker_id = %s AND {fenced}
            RETURNING model_id, seq_id
        ), advanced AS (
            UPDATE {models} m SET next_seq = done.seq_id + 1 FROM done
            WHERE m.id = done.model_id AND m.next_seq = done.seq_id
            RETURNING m.id
        ){"," if usage_ctes else ""} {usage_ctes}
        SELECT (SELECT count(*) FROM done), EXISTS (
            SELECT 1 FROM {ops} WHERE worker_id = %s AND status = %s
        )
    """
    result_db = Operation._meta.get_field("result").get_db_prep_save(result, connection)
    params = [Operation.Status.DONE, result_db, now, op.pk, Operation.Status.RUNNING]
    params += [fence.worker_id, *fence_params]
    waiting = [fence.worker_id, Operation.Status.PENDING]
    with connection.cursor() as cursor:
        cursor.execute(sql, params + usage_params + waiting)
        updated, others = cursor.fetchone()
    if not updated:
        op.status, op.result, op.finished_at = before
        _not_running(op, fence)
    return others


class ClaimLost(Exception):
    """An operation that ran is pending again: the database lost its claim (it crashed before
    the claim reached the disk). The worker's state of its model has taken it, the database's
    has not: the model is restored before it runs again."""


class Fenced(Exception):
    """The worker was declared dead (its lease ran out, or it was started again elsewhere
    under its name): nothing it did since counts. It must drop what it holds and register
    anew."""


def _not_running(op: Operation, fence: Fence) -> None:
    if not fence.holds():
        raise Fenced(f"operation {op.pk}: this worker's lease was taken away; result dropped")
    status = Operation.objects.filter(pk=op.pk).values_list("status", flat=True).first()
    if status == Operation.Status.PENDING:
        raise ClaimLost(f"operation {op.pk} ran, but the database has it pending again")
    log.warning("operation %s was no longer running (%s); result dropped", op.pk, status)


@transaction.atomic
def fail(
    op: Operation,
    error: str,
    category: str,
    fence: Fence | None = None,
    *,
    detail: dict | None = None,
) -> None:
    """Record ``op`` as failed (by its worker: under ``fence``, else by the control plane);
    ``detail``: what the failure answer carries besides the error (e.g. where to resume)."""
    unfinished = Operation.objects.filter(
        pk=op.pk, status__in=(Operation.Status.PENDING, Operation.Status.RUNNING)
    )
    if fence is not None:
        if not fence.lock():
            raise Fenced(f"operation {op.pk}: this worker's lease was taken away")
        unfinished = unfinished.filter(worker_id=fence.worker_id)
    updated = unfinished.update(
        status=Operation.Status.FAILED,
        error=error[:10000],
        error_category=category,
        finished_at=timezone.now(),
        result=detail,
    )
    if not updated:
        return
    _advance(op)
    if op.kind == Operation.Kind.CREATE_MODEL:
        _model_ended(op.model_id, TrainingModel.State.FAILED)
        session_fail_if_unstarted(op.session_id)
    elif op.kind == Operation.Kind.UNLOAD_MODEL:
        _model_ended(op.model_id)
        session_finish_if_unloaded(op.session_id)


def _advance(op: Operation) -> None:
    if op.model_id is not None and op.seq_id is not None:
        TrainingModel.objects.filter(pk=op.model_id, next_seq=op.seq_id).update(
            next_seq=op.seq_id + 1
        )


def _apply_effects(op: Operation, result: dict) -> None:
    kind = op.kind
    if kind == Operation.Kind.CREATE_MODEL:
        TrainingModel.objects.filter(pk=op.model_id, state=TrainingModel.State.CREATING).update(
            state=TrainingModel.State.READY
        )
        Session.objects.filter(pk=op.session_id, state=Session.State.PENDING).update(
            state=Session.State.ACTIVE
        )
    elif kind == Operation.Kind.UNLOAD_MODEL:
        _model_ended(op.model_id)
        session_finish_if_unloaded(op.session_id)
    elif kind in (Operation.Kind.SAVE_WEIGHTS, Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER):
        _record_checkpoint(op, result)
        recovery.recovery_from_save(op, result)


def _model_ended(model_id: str, state: str = TrainingModel.State.UNLOADED) -> None:
    """The model is over: its snapshot goes, and a restore it still waited for is not needed."""
    model = TrainingModel.objects.select_for_update().get(pk=model_id)
    model.state = state
    model.save(update_fields=["state"])
    recovery.recovery_discard(model)
    model.recoveries.filter(outcome=Recovery.Outcome.RESTORING).update(
        outcome=Recovery.Outcome.ENDED
    )


def _record_checkpoint(op: Operation, result: dict) -> None:
    spec = op.plan["checkpoint"]
    model = TrainingModel.objects.get(pk=op.model_id)
    expires = datetime.fromisoformat(spec["expires_at"]) if spec.get("expires_at") else None
    Checkpoint.objects.update_or_create(
        tinker_path=spec["tinker_path"],
        defaults={
            "tenant_id": op.tenant_id,
            "model": model,
            "kind": spec["kind"],
            "name": spec["name"],
            "storage_path": spec["storage_path"],
            "merged_path": result.get("_merged_path", ""),
            "storage_uri": spec.get("storage_uri", ""),
            "manifest": result.get("_manifest"),
            "sha256": manifest_digest(result["_manifest"]) if "_manifest" in result else "",
            "size_bytes": result.get("_plaintext_bytes", _folder_size(spec["storage_path"])),
            "kms_key_arn": (spec.get("sealing") or {}).get("key_arn", ""),
            "lora": model.lora,
            "base_model": model.base_model,
            "expires_at": expires,
        },
    )
    package_register(operation=op)  # every save is the next version of its package group
    if op.plan.get("sampler_id"):
        SamplingSession.objects.create(
            id=op.plan["sampler_id"],
            tenant_id=op.tenant_id,
            session_id=op.session_id,
            sampling_session_seq_id=op.payload.get("sampling_session_seq_id"),
            base_model=model.base_model,
            model_path=spec["tinker_path"],
            storage_path=spec["storage_path"],
            worker_id=op.worker_id,
        )


def _folder_size(path: str) -> int | None:
    folder = Path(path)
    if not folder.is_dir():
        return None
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@transaction.atomic
def requeue(*, request_id: str, fence: Fence, home: bool = False) -> bool:
    """An operation this worker claimed but will not record now: pending again, to run once
    more (one that ran but could not be recorded, after its model is restored, since the
    worker's state of the model has taken it and the database's has not). ``home``: on the
    worker its model (or sampler) is on now. False: it was recorded after all, or the worker
    no longer holds it."""
    if not fence.lock():
        return False
    fields: dict = {"status": Operation.Status.PENDING, "started_at": None}
    if home:
        fields["worker_id"] = _home_of(Operation.objects.get(pk=request_id))
    return bool(
        Operation.objects.filter(
            pk=request_id, status=Operation.Status.RUNNING, worker_id=fence.worker_id
        ).update(**fields)
    )


def _home_of(op: Operation) -> int | None:
    """The worker an operation belongs on: its model's, or its sampler's live model's, or its
    sampler's."""
    if op.model_id is not None:
        return TrainingModel.objects.filter(pk=op.model_id).values_list("worker", flat=True)[0]
    sampler = SamplingSession.objects.select_related("live_model").get(pk=op.sampling_session_id)
    return sampler.live_model.worker_id if sampler.live_model else sampler.worker_id
