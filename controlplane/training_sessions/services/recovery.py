"""Recovery points of training models and the plans to restore them.

Every training model has a recovery point: the state after some operation ``seq``, held in
storage, sealed with the tenant's KMS key. It is the latest of the user's state saves taken
without pending gradients and the service's own snapshots (which hold pending gradients too);
with neither, the model's start (its create_model, with the seed it was given). A worker that
takes a model over loads the point and replays, in ``seq_id`` order, the training operations
completed after it. Snapshots are internal: no registry version, deleted when superseded or
when the model ends. The point only ever moves forward.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_system
from controlplane.fleet.services import Fence
from controlplane.iam.resources import model_arn
from controlplane.kms import services as kms
from controlplane.storage import StorageError, join_uri, location

from ..models import Checkpoint, Operation, Recovery, TrainingModel
from .storage import storage_at, storage_root

log = logging.getLogger("loopwright.recovery")

# what changes a model's state, in the order it ran; everything else is skipped on replay
REPLAYED_KINDS = (
    Operation.Kind.CREATE_MODEL,
    Operation.Kind.FORWARD_BACKWARD,
    Operation.Kind.OPTIM_STEP,
    Operation.Kind.LOAD_WEIGHTS,
)
SNAPSHOT, SAVE = "snapshot", "save"


class NotHere(Exception):
    """The model is not (or no longer) on this worker: whatever asked for it goes back."""


@dataclass
class RestorePlan:
    """What a worker runs to bring a model back: open ``point`` (None: start from nothing),
    then run ``replay`` (completed operations, in seq order) and compare their results."""

    model: TrainingModel
    point: dict | None
    replay: list[Operation]
    recovery: Recovery | None

    @property
    def start(self) -> str:
        if self.point is None:
            return "its start"
        return f"the state after seq_id {self.point['seq']} ({self.point['kind']})"


def restore_plan(*, model_id: str, fence: Fence) -> RestorePlan:
    """The plan to restore ``model_id`` on the fenced worker, with the point's sealing checked
    now (a deleted or disabled key fails here, before anything loads)."""
    model = TrainingModel.objects.select_related("session", "tenant").get(pk=model_id)
    if model.worker_id != fence.worker_id or not fence.holds():
        raise NotHere(f"model {model_id} is not on this worker")
    point = dict(model.recovery) if model.recovery else None
    after = -1
    if point is not None:
        after = int(point["seq"])
        point["sealing"] = _opening(model, point)
    replay = list(
        model.operations.filter(
            status=Operation.Status.DONE,
            kind__in=REPLAYED_KINDS,
            seq_id__gt=after,
            seq_id__lt=model.next_seq,
        ).order_by("seq_id")
    )
    recovery = (
        model.recoveries.filter(outcome=Recovery.Outcome.RESTORING).order_by("-declared_at").first()
    )
    return RestorePlan(model, point, replay, recovery)


def models_to_restore(*, worker_id: int) -> list[str]:
    """Models on the worker that moved there and wait to be restored."""
    return list(
        Recovery.objects.filter(
            outcome=Recovery.Outcome.RESTORING,
            model__worker_id=worker_id,
            model__state__in=TrainingModel.LIVE_STATES,
        )
        .values_list("model_id", flat=True)
        .distinct()
    )


def _opening(model: TrainingModel, point: dict) -> dict | None:
    if not point.get("sealing"):
        return None
    resource = point.get("tinker_path") or point["storage_uri"]
    return kms.load_sealing(
        tenant=model.tenant,
        key_arn=point["sealing"]["key_arn"],
        resource=resource,
        field="model_id",
    )


@transaction.atomic
def restore_finished(
    *, plan: RestorePlan, fence: Fence, worker_name: str, replayed: int, deviation: float
) -> Recovery:
    """Record that ``plan`` ran: on its Recovery row (a new one when the model was restored on
    the same worker, whose results the database had lost) and in the audit log."""
    model = plan.model
    recovery = plan.recovery or Recovery(
        tenant=model.tenant,
        session=model.session,
        model=model,
        cause=Recovery.Cause.STATE_UNRECORDED,
        from_worker=worker_name,
        declared_at=timezone.now(),
        declared_by=f"worker {worker_name}",
    )
    recovery.to_worker = worker_name
    recovery.recovery_seq = plan.point["seq"] if plan.point else None
    recovery.recovery_kind = plan.point["kind"] if plan.point else "start"
    recovery.replayed = replayed
    recovery.restored_at = timezone.now()
    recovery.outcome = Recovery.Outcome.RESTORED
    recovery.save()
    if plan.recovery is not None:
        _end_earlier_moves(model, recovery)
    match = "identical" if deviation == 0 else f"within {deviation:.2g} (relative)"
    audit_system(
        tenant=model.tenant,
        action="sessions:RestoreModel",
        resource=model_arn(model.tenant, model.id),
        reason=(
            f"restored on worker {worker_name} from {plan.start}, {replayed} operation(s) "
            f"replayed with results {match}, {recovery.seconds:.1f} s after its worker was lost"
        ),
    )
    return recovery


def _end_earlier_moves(model: TrainingModel, restored: Recovery) -> None:
    """The moves the model was not restored after (it moved again first) end with ``restored``
    too, each naming the worker it moved to: the one the next move took it from. A later move
    (it moved on while this restore ran) is its next worker's to end."""
    earlier = model.recoveries.filter(outcome=Recovery.Outcome.RESTORING, pk__lt=restored.pk)
    first = earlier.order_by("pk").values_list("pk", flat=True).first()
    if first is None:
        return
    moves = list(model.recoveries.filter(pk__gte=first, pk__lte=restored.pk).order_by("pk"))
    for move, following in itertools.pairwise(moves):
        if move.outcome != Recovery.Outcome.RESTORING:
            continue
        move.outcome = Recovery.Outcome.RESTORED
        move.to_worker = following.from_worker
        move.restored_at = restored.restored_at
        move.recovery_seq, move.recovery_kind = restored.recovery_seq, restored.recovery_kind
        move.save(
            update_fields=[
                "outcome",
                "to_worker",
                "restored_at",
                "recovery_seq",
                "recovery_kind",
            ]
        )


def last_resumable(model: TrainingModel) -> str | None:
    """The newest state save of the model a user can resume from (its tinker path)."""
    return (
        Checkpoint.objects.filter(model=model, kind=Checkpoint.Kind.TRAINING)
        .order_by("-created_at")
        .values_list("tinker_path", flat=True)
        .first()
    )


# -- points ----------------------------------------------------------------------------------
def snapshot_target(*, model_id: str, seq: int) -> dict:
    """Where the service's snapshot of ``model_id`` after ``seq`` goes (the session's storage,
    beside its checkpoints) and the key that seals it (the session's, else the tenant's)."""
    model = TrainingModel.objects.select_related("session", "tenant").get(pk=model_id)
    uri = join_uri(
        storage_root(model.session.platform), f"{model.tenant_id}/{model.id}/snapshots/{seq}"
    )
    sealing = kms.save_sealing(
        tenant=model.tenant, key_arn=model.session.platform.get("kms_key_arn"), resource=uri
    )
    return {"storage_uri": uri, "storage_path": location(uri), "sealing": sealing}


def snapshot_record(*, model_id: str, fence: Fence, point: dict) -> bool:
    """Make a written snapshot the model's recovery point, if the fenced worker still holds the
    model and the point is newer than the current one; the one it replaces is deleted. False:
    it is not (the caller deletes what it wrote)."""
    with transaction.atomic():
        model = (
            TrainingModel.objects.select_for_update()
            .filter(pk=model_id, worker_id=fence.worker_id, state__in=TrainingModel.LIVE_STATES)
            .first()
        )
        if model is None or not fence.holds():
            return False
        if model.recovery is not None and model.recovery["seq"] >= point["seq"]:
            return False
        _replace(model, point)
    return True


def recovery_from_save(op: Operation, result: dict) -> None:
    """In a state save's completion: taken without pending gradients, it is a recovery point
    (newer than the service's snapshot, which then goes)."""
    if op.kind != Operation.Kind.SAVE_WEIGHTS or result.get("_pending_gradients", True):
        return
    spec = op.plan["checkpoint"]
    model = TrainingModel.objects.select_for_update().get(pk=op.model_id)
    if model.recovery is not None and model.recovery["seq"] >= op.seq_id:
        return
    _replace(
        model,
        {
            "seq": op.seq_id,
            "kind": SAVE,
            "tinker_path": spec["tinker_path"],
            "storage_uri": spec.get("storage_uri", ""),
            "storage_path": spec["storage_path"],
            "manifest": result.get("_manifest"),
            "sealing": spec.get("sealing"),
            "at": timezone.now().isoformat(),
        },
    )


def _replace(model: TrainingModel, point: dict) -> None:
    old = model.recovery
    model.recovery = point
    model.save(update_fields=["recovery"])
    if old is not None and old.get("kind") == SNAPSHOT:
        transaction.on_commit(lambda: snapshot_delete(old))


def recovery_discard(model: TrainingModel) -> None:
    """The model ended: its snapshot (not a user's save) goes once this transaction commits."""
    old = model.recovery
    if old is not None and old.get("kind") == SNAPSHOT:
        TrainingModel.objects.filter(pk=model.pk).update(recovery=None)
        transaction.on_commit(lambda: snapshot_delete(old))


def snapshot_delete(point: dict) -> None:
    try:
        storage_at(point["storage_uri"]).delete()
    except StorageError:
        log.warning("could not delete snapshot %s", point["storage_uri"], exc_info=True)
