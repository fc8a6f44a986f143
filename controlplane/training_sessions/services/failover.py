"""Workers that die, restart or stop: each is noticed once and its work moves, in one transaction.

A worker silent past its lease is declared dead by whoever looks first (a live worker's
heartbeat, the janitor, a control-plane long poll); the worker row is locked with SKIP LOCKED, so
two declarers never act on the same worker, and the declaration starts a new generation, so the
old process can claim or complete nothing more. Its unfinished operations go back to pending, its
models and samplers to live workers of the same base model (or wait for one); each moved model
gets a ``Recovery`` row, and the worker that takes it restores it from its recovery point.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef
from django.utils import timezone

from controlplane.audit.services import audit_system
from controlplane.fleet import replica_groups
from controlplane.fleet import services as fleet
from controlplane.fleet.models import ReplicaGroup, Worker
from controlplane.iam.resources import model_arn

from .. import operation_states as states
from ..models import Operation, Recovery, SamplingSession, TrainingModel
from . import placement, queue

log = logging.getLogger("loopwright.failover")

CAUSE_TEXT = {
    Recovery.Cause.WORKER_LOST: "was silent past its lease",
    Recovery.Cause.WORKER_RESTARTED: "was started again",
    Recovery.Cause.WORKER_STOPPED: "stopped and handed its models over",
    Recovery.Cause.GROUP_BROKEN: "lost its replica group",
}


def worker_start(*, by: str, **registration) -> fleet.Registration:
    """Register a worker process (``fleet.worker_register``'s arguments). If its previous
    incarnation still held the name (it died and came back before anyone noticed), that one is
    declared dead in the same transaction, and its models move like any dead worker's."""
    with transaction.atomic():
        reg = fleet.worker_register(**registration)
        if reg.previous_group is not None:
            _group_broken(
                reg.previous_group, by=by, reason=f"its member {reg.worker.name} was started again"
            )
        if reg.previous_state == Worker.State.ACTIVE:
            _release(reg.worker, cause=Recovery.Cause.WORKER_RESTARTED, by=by)
    return reg


def group_broken(group_id: int, *, by: str, reason: str) -> int:
    """A replica group lost a member or cannot go on (a collective failed, a member never
    joined): it ends, and its coordinator's replicated models move like a dead worker's, to be
    restored from their recovery points on a new group. Returns how many models moved."""
    with transaction.atomic():
        return _group_broken(group_id, by=by, reason=reason)


def _group_broken(group_id: int, *, by: str, reason: str) -> int:
    ended = replica_groups.group_end(group_id=group_id, reason=reason)
    if ended is None:
        return 0  # ended already
    coordinator, sharded = ended
    if coordinator is None or coordinator.state != Worker.State.ACTIVE:
        return 0  # its coordinator's own release moves everything
    log.warning("replica group %s ended (%s), noticed by %s", group_id, reason, by)
    # On a sharded group everything the coordinator held ran on the group.
    return _release(
        coordinator, cause=Recovery.Cause.GROUP_BROKEN, by=by, replicated_only=not sharded
    )


def groups_unused(*, by: str) -> int:
    """End the groups no live model trains on any more (a lease after they formed), so their
    followers serve other work again. Returns how many ended."""
    since = timezone.now() - timedelta(seconds=settings.WORKER_LEASE_SECONDS)
    used = TrainingModel.objects.filter(
        state__in=TrainingModel.LIVE_STATES, replicas__gt=1, worker__group=OuterRef("pk")
    )
    unused = list(  # a sharded group lasts while its members do: leaving costs a base reload
        ReplicaGroup.objects.exclude(state=ReplicaGroup.State.BROKEN)
        .filter(created_at__lt=since, sharded=False)
        .exclude(Exists(used))
        .values_list("pk", flat=True)
    )
    for group_id in unused:
        group_broken(group_id, by=by, reason="no model trains on it any more")
    return len(unused)


def groups_stuck_forming(*, by: str) -> int:
    """End the groups a member never joined within four leases (a follower waits up to two for
    the rendezvous, then one to join), or for a sharded group ``SHARDED_GROUP_FORM_SECONDS``
    (its members load and shard the base meanwhile); their models are placed again. Returns how
    many ended."""
    lease = settings.WORKER_LEASE_SECONDS
    stuck = replica_groups.groups_stuck_forming(
        seconds=4 * lease, sharded_seconds=max(4 * lease, settings.SHARDED_GROUP_FORM_SECONDS)
    )
    for group_id in stuck:
        group_broken(group_id, by=by, reason="a member did not join in time")
    return len(stuck)


def workers_declare_dead(*, by: str) -> list[str]:
    """Declare dead every worker whose lease ran out, each once, one per transaction; then
    re-home requests that landed on a worker after it was declared, and end the replica groups
    a member never joined. Returns the names."""
    declared = []
    while True:
        with transaction.atomic():
            worker = (
                fleet.expired_workers().select_for_update(skip_locked=True).order_by("pk").first()
            )
            if worker is None:
                break
            worker.state = Worker.State.DEAD
            worker.generation += 1
            worker.save(update_fields=["state", "generation"])
            _release(worker, cause=Recovery.Cause.WORKER_LOST, by=by)
        log.warning("worker %s was silent past its lease: declared dead by %s", worker.name, by)
        declared.append(worker.name)
    _rehome_strays()
    groups_stuck_forming(by=by)
    groups_unused(by=by)
    return declared


_last_look = 0.0
_look_lock = threading.Lock()


def look_for_dead_workers(*, by: str) -> list[str]:
    """``workers_declare_dead`` at most once per heartbeat interval in this process: for the
    control plane, which looks when a client's wait for an operation ran out (so a lost worker
    is noticed even where no other worker or janitor runs)."""
    global _last_look
    with _look_lock:
        now = time.monotonic()
        if now - _last_look < settings.WORKER_LEASE_SECONDS / 5:
            return []
        _last_look = now
    return workers_declare_dead(by=by)


def worker_hand_over(*, fence: fleet.Fence, by: str) -> int:
    """A worker that stops on its own: it is gone, and its models and samplers move now (it has
    snapshotted them). Returns how many models moved; 0 if it no longer held its lease."""
    with transaction.atomic():
        worker = (
            Worker.objects.select_for_update()
            .filter(pk=fence.worker_id, generation=fence.generation, state=Worker.State.ACTIVE)
            .first()
        )
        if worker is None:
            return 0
        worker.state = Worker.State.GONE
        worker.generation += 1
        worker.save(update_fields=["state", "generation"])
        return _release(worker, cause=Recovery.Cause.WORKER_STOPPED, by=by)


def _release(worker: Worker, *, cause: str, by: str, replicated_only: bool = False) -> int:
    """Everything ``worker`` held (``replicated_only``: its data-parallel models, when its
    replica group ended) goes back: unfinished operations to pending, models and samplers to
    other live workers or to waiting. The caller holds the worker's row lock. Returns how many
    models moved."""
    now = timezone.now()
    if not replicated_only and worker.group_id is not None:
        _group_broken(
            worker.group_id, by=by, reason=f"its member {worker.name} {CAUSE_TEXT[cause]}"
        )
    # The models first (locked, in one order): a submit for one of them waits for this
    # transaction and then sees its new worker; one that committed before is moved below.
    held = TrainingModel.objects.filter(worker=worker, state__in=TrainingModel.LIVE_STATES)
    if replicated_only:
        held = held.filter(replicas__gt=1)
    models = list(
        held.select_for_update(of=("self",)).select_related("session", "tenant").order_by("pk")
    )
    ops = Operation.objects.filter(worker=worker)
    if replicated_only:
        ops = ops.filter(model__in=[m.pk for m in models])
    running = dict(
        ops.filter(status=Operation.Status.RUNNING).values_list("model").annotate(n=Count("id"))
    )
    # One statement for all of them, so a claim racing it either finished first (and is put
    # back here) or finds nothing left to claim.
    states.release(ops)
    what = CAUSE_TEXT[cause]
    for model in models:
        queue.model_requeue(model, f"its worker {worker.name} {what}; waiting for another")
        if model.next_seq > 0:  # its create_model ran: it has state to bring back
            _record(model, worker, cause=cause, by=by, at=now, requeued=running.get(model.pk, 0))
    # The departure changes what the queue's models can have: placement runs again, in the
    # queue's order (the models moved off keep the place their creation gives them).
    for base_model in sorted({m.base_model for m in models}):
        placement.models_place_waiting(base_model=base_model)
    samplers = SamplingSession.objects.filter(worker=worker)
    if replicated_only:
        samplers = samplers.filter(live_model__in=[m.pk for m in models])
    for sampler in samplers.select_related("session"):
        placement.sampler_move(sampler, placement.sampler_home(sampler))
    return len(models)


def _record(
    model: TrainingModel, worker: Worker, *, cause: str, by: str, at, requeued: int
) -> Recovery:
    point = model.recovery or {}
    recovery = Recovery.objects.create(
        tenant=model.tenant,
        session=model.session,
        model=model,
        cause=cause,
        from_worker=worker.name,
        declared_at=at,
        declared_by=by,
        requeued=requeued,
        recovery_seq=point.get("seq"),
        recovery_kind=point.get("kind", "start"),
    )
    where = f"the state after seq_id {point['seq']} ({point['kind']})" if point else "its start"
    audit_system(
        tenant=model.tenant,
        action="sessions:MoveModel",
        resource=model_arn(model.tenant, model.id),
        reason=(
            f"worker {worker.name} {CAUSE_TEXT[cause]} (noticed by {by}); model moved off it, "
            f"{requeued} running operation(s) back to pending; it resumes from {where} and "
            f"replays the operations completed since"
        )[:1000],
    )
    return recovery


def _rehome_strays() -> None:
    """Requests queued on a worker after it was declared dead or stopped (their submit read the
    old worker just before the move): each goes where it belongs now
    (``operation_states.rehome_strays``), and the workers that got some are woken."""
    woken = states.rehome_strays((Worker.State.DEAD, Worker.State.GONE))
    for worker in Worker.objects.filter(pk__in=woken):
        placement.dispatch.wake_worker(worker.queue)
