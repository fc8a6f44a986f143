"""Placement of data-parallel models on replica groups, and the end of a group: which workers
form a group (a coordinator with room, idle followers), that followers take no other work, that
a later model of the same size joins a group with room, why a model waits when no group can
form, and that a group ending (a collective failed, a member lost, restarted or never joining)
moves its coordinator's replicated models, and only those, to be restored on a new group."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from controlplane.fleet import replica_groups
from controlplane.fleet import services as fleet
from controlplane.fleet.models import ReplicaGroup, Worker
from controlplane.training_sessions.models import Recovery, TrainingModel
from controlplane.training_sessions.services import failover, placement
from controlplane.training_sessions.services.sessions import session_create
from tests.fleet import started
from tests.support.tiny_worker import TINY

pytestmark = pytest.mark.django_db


def model(person, replicas: int, *, ran: bool = False) -> TrainingModel:
    """A training model placed as create_model places it; ``ran``: its create_model ran."""
    session = session_create(tenant=person.tenant, platform={})
    with transaction.atomic():
        m = TrainingModel.objects.create(
            tenant=person.tenant,
            session=session,
            model_seq_id=0,
            base_model=TINY,
            lora={"rank": 4, "alpha": 8.0, "seed": 0},
            replicas=replicas,
            worker=None,
            placement=TrainingModel.Placement.WAITING_FOR_WORKER,
            next_seq=1 if ran else 0,
        )
        placement.model_place_new(m)
    m.refresh_from_db()
    return m


def members(group_id: int) -> list[tuple[str, int]]:
    return list(
        Worker.objects.filter(group_id=group_id).order_by("rank").values_list("name", "rank")
    )


def test_a_group_forms_from_a_worker_with_room_and_idle_followers(people) -> None:
    alice = people[0]
    for name in ("wa", "wb", "wc"):
        started(name, TINY)
    single = model(alice, 1)
    assert single.worker.name == "wa"  # the most room, then the name
    dp = model(alice, 2)
    coordinator = dp.worker
    assert dp.placement == TrainingModel.Placement.PLACED
    assert coordinator.name == "wa"  # busy with room: it leads; an idle one follows
    group = ReplicaGroup.objects.get()
    assert (group.world_size, group.state, group.rendezvous) == (2, "forming", "")
    assert members(group.pk) == [("wa", 0), ("wb", 1)]
    # a follower serves only its group: single models and samplers go elsewhere
    for _ in range(3):
        assert model(alice, 1).worker.name in ("wa", "wc")
    # a second model of the same size joins the group with room
    assert model(alice, 2).worker.name == "wa"
    assert ReplicaGroup.objects.count() == 1


def test_a_model_waits_with_the_reason_when_no_group_can_form(people) -> None:
    alice = people[0]
    started("wa", TINY)
    lone = model(alice, 2)
    assert lone.worker is None
    assert lone.placement == TrainingModel.Placement.WAITING_FOR_WORKER
    assert "waiting for 2 workers that serve" in lone.status_reason
    assert "1 is live" in lone.status_reason
    started("wb", TINY)
    model(alice, 1)  # wa has a model now
    model(alice, 1)  # and wb too: neither is idle
    busy = model(alice, 2)
    assert busy.placement == TrainingModel.Placement.WAITING_FOR_CAPACITY
    assert "a follower serves only its group" in busy.status_reason
    started("wc", TINY)  # an idle worker: the waiting ones form a group, oldest first
    placed = placement.models_place_waiting()
    assert lone.pk in placed
    lone.refresh_from_db()
    assert lone.worker is not None and lone.worker.group is not None
    assert ReplicaGroup.objects.get().world_size == 2


def test_the_end_of_a_group_moves_only_its_models(people) -> None:
    alice = people[0]
    for name in ("wa", "wb", "wc"):
        started(name, TINY)
    single = model(alice, 1, ran=True)
    dp = model(alice, 2, ran=True)
    group = ReplicaGroup.objects.get()
    assert members(group.pk) == [("wa", 0), ("wb", 1)]
    moved = failover.group_broken(group.pk, by="worker wa", reason="a collective failed")
    assert moved == 1
    group.refresh_from_db()
    assert group.state == "broken" and group.status_reason == "a collective failed"
    assert not Worker.objects.filter(group=group).exists()
    single.refresh_from_db()
    assert single.worker.name == "wa"  # untouched
    dp.refresh_from_db()
    # placed again at once: wa (busy, room) leads a new group with an idle follower
    new = ReplicaGroup.objects.exclude(pk=group.pk).get()
    assert dp.worker.name == "wa" and dp.worker.group_id == new.pk
    (recovery,) = Recovery.objects.filter(model=dp)
    assert recovery.cause == Recovery.Cause.GROUP_BROKEN
    assert recovery.outcome == Recovery.Outcome.RESTORING
    assert not Recovery.objects.filter(model=single).exists()
    # ending it again changes nothing
    assert failover.group_broken(group.pk, by="janitor", reason="again") == 0


def test_a_member_lost_or_started_again_ends_its_group(people, settings) -> None:
    alice = people[0]
    for name in ("wa", "wb", "wc", "wd"):
        started(name, TINY)
    dp = model(alice, 2, ran=True)
    first = ReplicaGroup.objects.get()
    follower = Worker.objects.get(group=first, rank=1)
    started(follower.name, TINY)  # started again: its old process's group ends
    first.refresh_from_db()
    assert first.state == "broken" and "was started again" in first.status_reason
    follower.refresh_from_db()
    assert follower.group_id != first.pk  # free again (it may follow the model's new group)
    dp.refresh_from_db()
    second = dp.worker.group
    assert second is not None and second.pk != first.pk
    # a follower silent past its lease: declared dead, its group ends
    lost = Worker.objects.get(group=second, rank=1)
    Worker.objects.filter(pk=lost.pk).update(lease_expires_at=timezone.now() - timedelta(1))
    assert failover.workers_declare_dead(by="janitor") == [lost.name]
    second.refresh_from_db()
    assert second.state == "broken" and f"{lost.name} was silent" in second.status_reason
    causes = list(Recovery.objects.filter(model=dp).values_list("cause", flat=True))
    assert causes == [Recovery.Cause.GROUP_BROKEN] * 2


def test_a_group_a_member_never_joined_ends(people, settings) -> None:
    alice = people[0]
    for name in ("wa", "wb"):
        started(name, TINY)
    dp = model(alice, 2, ran=True)
    group = ReplicaGroup.objects.get()
    ReplicaGroup.objects.filter(pk=group.pk).update(
        created_at=timezone.now() - timedelta(seconds=5 * settings.WORKER_LEASE_SECONDS)
    )
    failover.workers_declare_dead(by="janitor")
    group.refresh_from_db()
    assert group.state == "broken" and "did not join in time" in group.status_reason
    dp.refresh_from_db()
    assert dp.worker is not None  # both workers are free again: a new group formed
    assert dp.worker.group.state == "forming"


def test_only_the_fenced_coordinator_announces_and_readies_its_group(people) -> None:
    alice = people[0]
    regs = {name: started(name, TINY) for name in ("wa", "wb")}
    model(alice, 2)
    group = ReplicaGroup.objects.get()
    lead, follower = (fleet.Fence(regs[n].worker.pk, regs[n].generation) for n in ("wa", "wb"))
    view = replica_groups.membership(fence=follower)
    assert (view.rank, view.world_size, view.state, view.rendezvous) == (1, 2, "forming", "")
    assert not replica_groups.group_announce(group_id=group.pk, fence=follower, rendezvous="x")
    stale = fleet.Fence(lead.worker_id, lead.generation - 1)
    assert not replica_groups.group_announce(group_id=group.pk, fence=stale, rendezvous="x")
    url = "tcp://127.0.0.1:29500"
    assert replica_groups.group_announce(group_id=group.pk, fence=lead, rendezvous=url)
    assert replica_groups.membership(fence=follower).rendezvous == url
    assert not replica_groups.group_ready(group_id=group.pk, fence=follower)
    assert replica_groups.group_ready(group_id=group.pk, fence=lead)
    assert replica_groups.membership(fence=lead).state == "ready"
    failover.group_broken(group.pk, by="test", reason="ended")
    # the model was placed again at once, on a new group of the same two workers
    for fence in (lead, follower):
        assert replica_groups.membership(fence=fence).group_id != group.pk
    new = ReplicaGroup.objects.exclude(pk=group.pk).get()
    failover.group_broken(new.pk, by="test", reason="ended")
    TrainingModel.objects.update(state=TrainingModel.State.UNLOADED)
    failover.group_broken(ReplicaGroup.objects.exclude(state="broken").get().pk, by="t", reason="")
    assert replica_groups.membership(fence=lead) is None  # no group: none of its own


def test_a_group_no_model_trains_on_ends(people, settings) -> None:
    alice = people[0]
    for name in ("wa", "wb"):
        started(name, TINY)
    dp = model(alice, 2, ran=True)
    group = ReplicaGroup.objects.get()
    failover.workers_declare_dead(by="janitor")
    group.refresh_from_db()
    assert group.state == "forming"  # in use
    TrainingModel.objects.filter(pk=dp.pk).update(state=TrainingModel.State.UNLOADED)
    failover.workers_declare_dead(by="janitor")
    group.refresh_from_db()
    assert group.state == "forming"  # younger than a lease: a model may be on its way
    ReplicaGroup.objects.filter(pk=group.pk).update(
        state="ready",  # every rank joined
        created_at=timezone.now() - timedelta(seconds=5 * settings.WORKER_LEASE_SECONDS),
    )
    failover.workers_declare_dead(by="janitor")
    group.refresh_from_db()
    assert group.state == "broken" and group.status_reason == "no model trains on it any more"
    assert not Worker.objects.filter(group__isnull=False).exists()


def test_a_group_has_the_room_of_its_smallest_member(people) -> None:
    """Every member holds every model of its group: a follower with room for one model makes a
    group with room for one."""
    alice = people[0]
    started("wa", TINY, capacity=4)
    started("wb", TINY, capacity=1)
    assert model(alice, 2).worker.name == "wa"
    second = model(alice, 2)
    assert second.worker is None
    assert second.placement == TrainingModel.Placement.WAITING_FOR_CAPACITY
