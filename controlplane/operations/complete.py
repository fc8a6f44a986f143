"""The end of an operation: its result recorded (or its failure), its model's ``seq_id`` moved
on, its effects applied and its usage rows written, in one transaction.

Completing stores the result, advances ``next_seq`` and applies the operation's effects (model
ready, checkpoint recorded and registered, sampler opened, model unloaded, sampled sequences
recorded) at once; a kind with
no effects is completed in one statement on PostgreSQL. Every completion is fenced by the
worker's lease generation. A model that cannot be restored after its worker was lost fails
with its unfinished operations (``restore_failed``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from django.db import connection, transaction
from django.utils import timezone

from controlplane.audit.services import audit_system
from controlplane.fleet.services import Fence
from controlplane.iam.resources import model_arn
from controlplane.metering.rollup import usage_write_ctes
from controlplane.metering.services import usage_record_for, usage_rows_for
from controlplane.registry.services import package_register
from controlplane.storage import manifest_digest
from controlplane.training_sessions import operation_states as states
from controlplane.training_sessions.models import (
    Checkpoint,
    Operation,
    Recovery,
    SamplingSession,
    Session,
    TrainingModel,
)
from controlplane.training_sessions.services import recordings, recovery
from controlplane.training_sessions.services.sessions import (
    session_fail_if_unstarted,
    session_finish_if_unloaded,
)

log = logging.getLogger(__name__)


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
    if not states.complete(op, result, now, fence):
        _not_running(op, fence)
        return
    _advance(op)
    _apply_effects(op, result)
    usage_record_for(op)  # the tokens it processed, committed with its completion


def _complete_in_one_statement(op: Operation, result: dict, now: datetime, fence: Fence) -> bool:
    """The same as ``_complete`` for a kind without effects, as one statement (so one round
    trip, atomic by itself): the result, next_seq and the usage rows with their day's totals;
    it also looks for other pending operations on the worker."""
    before = op.status, op.result, op.finished_at
    op.status, op.result, op.finished_at = states.COMPLETE.target, result, now
    usage_ctes, usage_params = usage_write_ctes(usage_rows_for(op), gate="done")
    if recordings.records(op):  # its sequences are recorded in the same statement
        recording = recordings.recording_write_cte(op, result, now, gate="done")
        if recording is not None:
            cte, params = recording
            usage_ctes = f"{usage_ctes}, {cte}" if usage_ctes else cte
            usage_params = usage_params + params
    ops, models = Operation._meta.db_table, TrainingModel._meta.db_table
    fenced, fence_params = fence.sql()
    result_db = Operation._meta.get_field("result").get_db_prep_save(result, connection)
    setting, set_params = states.COMPLETE.sql_set(result=result_db, finished_at=now)
    running, from_params = states.COMPLETE.sql_from()
    sql = f"""
        WITH done AS (
            UPDATE {ops} SET {setting}
            WHERE id = %s AND {running} AND worker_id = %s AND {fenced}
            RETURNING model_id, seq_id
        ), advanced AS (
            UPDATE {models} m SET next_seq = done.seq_id + 1 FROM done
            WHERE m.id = done.model_id AND m.next_seq = done.seq_id
            RETURNING m.id
        ){"," if usage_ctes else ""} {usage_ctes}
        SELECT (SELECT count(*) FROM done), EXISTS (
            SELECT 1 FROM {ops} WHERE worker_id = %s AND status = %s
        )
    """  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
    params = [*set_params, op.pk, *from_params, fence.worker_id, *fence_params]
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
    unfinished = Operation.objects.filter(pk=op.pk)
    if fence is not None:
        if not fence.lock():
            raise Fenced(f"operation {op.pk}: this worker's lease was taken away")
        unfinished = unfinished.filter(worker_id=fence.worker_id)
    if not states.fail(unfinished, error, category, detail=detail):
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
    elif recordings.records(op):
        recordings.recording_insert(op, result, op.finished_at or timezone.now())


def _model_ended(model_id: str, state: str = TrainingModel.State.UNLOADED) -> None:
    """The model is over: its snapshot goes, and a restore it still waited for is not needed."""
    model = TrainingModel.objects.select_for_update().get(pk=model_id)
    model.state = state
    model.ended_at = timezone.now()
    model.save(update_fields=["state", "ended_at"])
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


def restore_failed(*, model_id: str, worker_name: str, why: str) -> str:
    """The model cannot be brought back: it fails, with its unfinished operations, saying where
    the user can resume from. Returns the message."""
    with transaction.atomic():
        model = TrainingModel.objects.select_for_update(of=("self",)).get(pk=model_id)
        resume = recovery.last_resumable(model)
        where = (
            f"resume from {resume} (create_training_client_from_state_with_optimizer)"
            if resume
            else "it has no state save to resume from; start it again"
        )
        message = (
            f"model {model_id} could not be restored after its worker was lost: {why}; {where}"
        )
        detail = {"code": "model_lost", "resume_from": resume}
        for op in model.operations.filter(
            status__in=(Operation.Status.PENDING, Operation.Status.RUNNING)
        ):
            fail(op, message, "server", detail=detail)
        TrainingModel.objects.filter(pk=model_id).update(state=TrainingModel.State.FAILED)
        recovery.recovery_discard(model)
        model.recoveries.filter(outcome=Recovery.Outcome.RESTORING).update(
            outcome=Recovery.Outcome.FAILED, error=message[:5000], to_worker=worker_name
        )
        audit_system(
            tenant=model.tenant,
            action="sessions:RestoreModel",
            resource=model_arn(model.tenant, model.id),
            reason=message[:1000],
        )
    return message
