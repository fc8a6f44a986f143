"""The worker's claims: find its runnable operations and take each with a conditional UPDATE.

A training model's operation is runnable when its ``seq_id`` equals the model's ``next_seq``;
claiming is a conditional UPDATE (pending → running), so a redelivered nudge never runs an
operation twice. A worker's pass claims every model's runnable operation and a fair share of
samples at once (``claim_runnable``). On PostgreSQL a look and its claim are one statement. An operation claimed but
not recorded goes back to pending (``requeue``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from controlplane import row_mapper
from controlplane.fleet.models import Worker
from controlplane.fleet.services import Fence
from controlplane.training_sessions import operation_states as states
from controlplane.training_sessions.models import Operation, TrainingModel


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


def pending_samples(*, worker: Worker, limit: int | None) -> list[Operation]:
    pending = Operation.objects.filter(
        worker=worker, status=Operation.Status.PENDING, kind=Operation.Kind.SAMPLE
    ).order_by("created_at")
    return list(pending if limit is None else pending[:limit])


def claim_runnable(*, fence: Fence, sample_limit: int) -> tuple[list[Operation], list[Operation]]:
    """One pass's work, claimed under ``fence``: every training model's next operation (its
    ``next_seq``, so at most one per model and sequence order untouched), and up to
    ``sample_limit`` pending samples taken round-robin across tenants (each tenant's oldest
    first, so one tenant's backlog never fills the pass). Both oldest first. On PostgreSQL one
    statement."""
    if connection.vendor == "postgresql":
        claimed = _claim_runnable_in_one_statement(fence, sample_limit)
    else:
        worker = Worker(pk=fence.worker_id)
        picked = next_training_ops(worker=worker) + _fair_samples(worker, sample_limit)
        claimed = [op for op in picked if claim(op, fence)]
    claimed.sort(key=lambda op: op.created_at)
    heads = [op for op in claimed if op.kind != Operation.Kind.SAMPLE]
    return heads, [op for op in claimed if op.kind == Operation.Kind.SAMPLE]


def _fair_samples(worker: Worker, limit: int) -> list[Operation]:
    """Pending samples, the first of every tenant, then the second of every tenant, …; within a
    turn oldest first (as the one-statement claim's ``ORDER BY turn, created_at``)."""
    turns: dict[object, int] = {}
    ranked = []
    for op in pending_samples(worker=worker, limit=None):
        turns[op.tenant_id] = turn = turns.get(op.tenant_id, 0) + 1
        ranked.append((turn, op.created_at, op))
    ranked.sort(key=lambda r: r[:2])
    return [op for _, _, op in ranked[:limit]]


def _claim_runnable_in_one_statement(fence: Fence, sample_limit: int) -> list[Operation]:
    # Each ARRAY(...) is evaluated once. The heads lock their rows and skip those another
    # transaction holds; the samples' round-robin (a window) cannot lock in the same SELECT, so
    # the UPDATE re-checks each picked row is still pending (one just failed, say by a stop,
    # is left alone).
    ops, models = Operation._meta.db_table, TrainingModel._meta.db_table
    fenced, fence_params = fence.sql()
    setting, set_params = states.CLAIM.sql_set(started_at=timezone.now())
    claimable, from_params = states.CLAIM.sql_from("o.status")
    sql = f"""
        UPDATE {ops} o SET {setting}
        WHERE o.id = ANY(ARRAY(
            SELECT h.id FROM {ops} h JOIN {models} m ON m.id = h.model_id
            WHERE h.worker_id = %s AND h.status = %s AND h.seq_id = m.next_seq
            FOR UPDATE OF h SKIP LOCKED
        ) || ARRAY(
            SELECT s.id FROM (
                SELECT id, created_at,
                       row_number() OVER (PARTITION BY tenant_id ORDER BY created_at) AS turn
                FROM {ops} WHERE worker_id = %s AND status = %s AND kind = %s
            ) s
            ORDER BY s.turn, s.created_at LIMIT %s
        )) AND {claimable} AND o.worker_id = %s AND {fenced}
        RETURNING {_returned("o")}
    """  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
    pending, worker_id = Operation.Status.PENDING, fence.worker_id
    params = [*set_params, worker_id, pending]
    params += [worker_id, pending, Operation.Kind.SAMPLE, sample_limit, *from_params, worker_id]
    return _claimed(sql, params + fence_params)


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
    """``op`` claimed under ``fence`` (``operation_states.CLAIM``), committed without waiting
    for the disk; False: someone else took or moved it."""
    with _unflushed():
        return states.claim(op, fence)


@transaction.atomic
def requeue(*, request_id: str, fence: Fence, home: bool = False) -> bool:
    """An operation this worker claimed but will not record now: pending again, to run once
    more (one that ran but could not be recorded, after its model is restored, since the
    worker's state of the model has taken it and the database's has not). ``home``: on the
    worker it belongs on now (``operation_states.home_worker_id``). False: it was recorded
    after all, or the worker no longer holds it."""
    if not fence.lock():
        return False
    return states.requeue(request_id, fence, home=home)
