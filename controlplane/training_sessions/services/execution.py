"""The worker's side: find runnable operations, claim them, and complete them in one transaction.

A training model's operation is runnable when its ``seq_id`` equals the model's ``next_seq``;
claiming is a conditional UPDATE (pending → running), so a redelivered nudge never runs an
operation twice. Completing stores the result, advances ``next_seq`` and applies the
operation's effects (model ready, checkpoint recorded, sampler opened, model unloaded) at once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.metering.services import usage_record_for
from controlplane.registry.services import package_register
from controlplane.storage import manifest_digest

from .. import notify
from ..models import Checkpoint, Operation, SamplingSession, Session, TrainingModel
from .sessions import session_finish_if_unloaded

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


def settle_gaps(*, worker: Worker, gap_seconds: float) -> int:
    """Keep each model's sequence moving past requests that will never run.

    An operation already finished at ``next_seq`` (a request refused on arrival) is stepped
    over. A ``seq_id`` that never arrived while later ones have waited ``gap_seconds`` (the
    client gave up on it) is recorded as failed, so the later ones can run.
    """
    settled = 0
    models = TrainingModel.objects.filter(
        worker=worker, operations__status=Operation.Status.PENDING
    ).distinct()
    for model in models:
        while True:
            at_next = Operation.objects.filter(model=model, seq_id=model.next_seq).first()
            if at_next is not None:
                if at_next.status not in Operation.FINISHED:
                    break
                _advance(at_next)
                model.refresh_from_db(fields=["next_seq"])
                settled += 1
                continue
            waiting = model.operations.filter(
                status=Operation.Status.PENDING, seq_id__gt=model.next_seq
            )
            oldest = waiting.order_by("created_at").values_list("created_at", flat=True).first()
            if oldest is not None and model.placed_at is not None:
                oldest = max(oldest, model.placed_at)  # time spent waiting for a worker is no gap
            if oldest is None or (timezone.now() - oldest).total_seconds() < gap_seconds:
                break
            _record_missing(model)
            model.refresh_from_db(fields=["next_seq"])
            settled += 1
    return settled


@transaction.atomic
def _record_missing(model: TrainingModel) -> None:
    seq = model.next_seq
    op = Operation.objects.create(
        tenant_id=model.tenant_id,
        session_id=model.session_id,
        model=model,
        worker_id=model.worker_id,
        seq_id=seq,
        kind="missing",
        payload={},
        payload_digest="",
        status=Operation.Status.FAILED,
        error=f"seq_id {seq} never arrived; later requests ran without it",
        error_category="user",
        finished_at=timezone.now(),
    )
    _advance(op)


def pending_samples(*, worker: Worker, limit: int) -> list[Operation]:
    return list(
        Operation.objects.filter(
            worker=worker, status=Operation.Status.PENDING, kind=Operation.Kind.SAMPLE
        ).order_by("created_at")[:limit]
    )


def has_waiting_work(*, worker: Worker, older_than_seconds: float = 2.0) -> bool:
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    return Operation.objects.filter(
        worker=worker, status=Operation.Status.PENDING, created_at__lt=cutoff
    ).exists()


def claim(op: Operation) -> bool:
    now = timezone.now()
    won = Operation.objects.filter(pk=op.pk, status=Operation.Status.PENDING).update(
        status=Operation.Status.RUNNING, started_at=now
    )
    if won:
        op.status, op.started_at = Operation.Status.RUNNING, now
    return bool(won)


@transaction.atomic
def complete(op: Operation, result: dict) -> None:
    now = timezone.now()
    updated = Operation.objects.filter(pk=op.pk, status=Operation.Status.RUNNING).update(
        status=Operation.Status.DONE, result=result, finished_at=now
    )
    if not updated:
        log.warning("operation %s was no longer running; result dropped", op.pk)
        return
    op.status, op.result, op.finished_at = Operation.Status.DONE, result, now
    _advance(op)
    _apply_effects(op, result)
    usage_record_for(op)  # the tokens it processed, committed with its completion
    notify.send(op.pk)


@transaction.atomic
def fail(op: Operation, error: str, category: str) -> None:
    updated = Operation.objects.filter(
        pk=op.pk, status__in=(Operation.Status.PENDING, Operation.Status.RUNNING)
    ).update(
        status=Operation.Status.FAILED,
        error=error[:10000],
        error_category=category,
        finished_at=timezone.now(),
    )
    if not updated:
        return
    _advance(op)
    notify.send(op.pk)
    if op.kind == Operation.Kind.CREATE_MODEL:
        TrainingModel.objects.filter(pk=op.model_id).update(state=TrainingModel.State.FAILED)
    elif op.kind == Operation.Kind.UNLOAD_MODEL:
        TrainingModel.objects.filter(pk=op.model_id).update(state=TrainingModel.State.UNLOADED)
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
        TrainingModel.objects.filter(pk=op.model_id).update(state=TrainingModel.State.UNLOADED)
        session_finish_if_unloaded(op.session_id)
    elif kind in (Operation.Kind.SAVE_WEIGHTS, Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER):
        _record_checkpoint(op, result)


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
def recover_worker(*, worker: Worker) -> int:
    """At worker start: work it was running died with its previous process; fail it, retryably.

    The engine state of its models (adapters, optimizer moments, pending gradients) is gone
    too, so those models are marked failed; their sessions can resume from a saved state.
    """
    running = list(Operation.objects.filter(worker=worker, status=Operation.Status.RUNNING))
    for op in running:
        fail(op, "the worker restarted while running this operation; retry it", "server")
    lost = TrainingModel.objects.filter(worker=worker, state__in=TrainingModel.LIVE_STATES)
    for model in lost:
        pending = model.operations.filter(status=Operation.Status.PENDING)
        for op in pending:
            fail(
                op,
                f"model {model.id} was lost when its worker restarted; resume from a saved state",
                "server",
            )
    lost.update(state=TrainingModel.State.FAILED)
    return len(running)
