"""Replica groups: workers of one base model that serve data-parallel training models together.

Placement names the members (``group_form``: rank 0, the coordinator, is the worker that claims
the models' operations); the coordinator opens a rendezvous and announces it
(``group_announce``); every follower reads it from its membership (``membership``) and joins;
once all have joined the coordinator marks the group ready (``group_ready``). A group is never
repaired: a lost or leaving member ends it (``group_end``), and its models are placed again,
on a new group formed from live workers. Every change names the worker's fence, so a process
declared dead changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from controlplane import dispatch

from .models import ReplicaGroup, Worker
from .services import Fence


@dataclass(frozen=True)
class Membership:
    """What a worker needs to join its group: the group, its rank, the world size, the state and
    the rendezvous (empty until rank 0 announces it)."""

    group_id: int
    rank: int
    world_size: int
    state: str
    rendezvous: str


def group_form(
    *, base_model: str, members: Sequence[Worker], sharded: bool = False
) -> ReplicaGroup:
    """A new group of ``members`` (the first is rank 0), in the caller's transaction, which
    holds their row locks; each member is woken after the commit to join it. ``sharded``: the
    members shard the base over the group (they are workers that cannot hold it whole)."""
    group = ReplicaGroup.objects.create(
        base_model_id=base_model, world_size=len(members), sharded=sharded
    )
    for rank, worker in enumerate(members):
        Worker.objects.filter(pk=worker.pk).update(group=group, rank=rank)
        worker.group, worker.rank = group, rank
        dispatch.wake_worker(worker.queue)
    return group


def membership(*, fence: Fence) -> Membership | None:
    """The group the fenced worker belongs to now (None: none, or the fence no longer holds)."""
    row = (
        Worker.objects.filter(
            pk=fence.worker_id,
            generation=fence.generation,
            state=Worker.State.ACTIVE,
            group__isnull=False,
        )
        .exclude(group__state=ReplicaGroup.State.BROKEN)
        .values_list("group_id", "rank", "group__world_size", "group__state", "group__rendezvous")
        .first()
    )
    return Membership(*row) if row is not None else None


def group_announce(*, group_id: int, fence: Fence, rendezvous: str) -> bool:
    """Rank 0 publishes where the others join; False if it no longer leads a forming group."""
    return bool(_forming_led_by(group_id, fence).update(rendezvous=rendezvous))


def group_ready(*, group_id: int, fence: Fence) -> bool:
    """Every rank joined (rank 0 saw them all): operations can run. False if the group ended
    meanwhile, or the fence no longer holds."""
    return bool(
        _forming_led_by(group_id, fence).update(
            state=ReplicaGroup.State.READY, ready_at=timezone.now()
        )
    )


def _forming_led_by(group_id: int, fence: Fence):
    """The group, while it forms with the fenced worker as its rank 0."""
    return ReplicaGroup.objects.filter(
        pk=group_id,
        state=ReplicaGroup.State.FORMING,
        members__pk=fence.worker_id,
        members__rank=0,
        members__generation=fence.generation,
    )


def group_end(*, group_id: int, reason: str) -> tuple[Worker | None, bool] | None:
    """End the group (in the caller's transaction): it is broken for good, its members are free
    again and are woken to leave it. Returns its coordinator (whose replicated models, or on a
    sharded group everything, the caller moves) and whether it was sharded; None if it had
    already ended."""
    group = ReplicaGroup.objects.select_for_update().filter(pk=group_id).first()
    if group is None or group.state == ReplicaGroup.State.BROKEN:
        return None
    members = list(Worker.objects.select_for_update().filter(group=group).order_by("pk"))
    coordinator = next((w for w in members if w.rank == 0), None)
    group.state, group.status_reason, group.ended_at = (
        ReplicaGroup.State.BROKEN,
        reason[:1000],
        timezone.now(),
    )
    group.save(update_fields=["state", "status_reason", "ended_at"])
    Worker.objects.filter(group=group).update(group=None, rank=None)
    for worker in members:
        if worker.state == Worker.State.ACTIVE:
            dispatch.wake_worker(worker.queue)
    return coordinator, group.sharded


def groups_stuck_forming(*, seconds: float, sharded_seconds: float) -> list[int]:
    """Groups still forming ``seconds`` after they were named (``sharded_seconds`` for a sharded
    group, whose members load and shard their base meanwhile): a member never joined."""
    now = timezone.now()
    return list(
        ReplicaGroup.objects.filter(state=ReplicaGroup.State.FORMING)
        .filter(
            Q(sharded=False, created_at__lt=now - timedelta(seconds=seconds))
            | Q(sharded=True, created_at__lt=now - timedelta(seconds=sharded_seconds))
        )
        .values_list("pk", flat=True)
    )
