"""Placement of a base no live worker holds whole: workers register their memory and the ranks
their base must be sharded over (``shard_ranks``); models and samplers of such a base go to a
sharded group of that many of them (its coordinator; followers take nothing), a group that
lasts while its members do; a worker that holds the base whole is preferred; ``replicas`` > 1
is refused on a sharded base; and the end of a sharded group moves everything its coordinator
held."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.fleet import services as fleet
from controlplane.fleet.models import BaseModel, ReplicaGroup, Worker
from controlplane.operations.replicas import replicas_checked
from controlplane.operations.sampling import sampler_create
from controlplane.training_sessions.models import TrainingModel
from controlplane.training_sessions.services import failover, placement
from tests.controlplane.training_sessions.test_replica_groups import members, model
from tests.fleet import registration, started
from tests.support.tiny_worker import TINY

pytestmark = pytest.mark.django_db

GIB = 2**30


def start_sharded(
    name: str, *, shard_ranks: int = 2, capacity: int = 4, memory: int = 40 * GIB
) -> fleet.Registration:
    """A worker of 40 GiB that must shard the base (72 GiB whole) over ``shard_ranks``."""
    return started(
        name,
        TINY,
        capacity=capacity,
        memory_bytes=memory if shard_ranks > 1 else 80 * GIB,
        shard_ranks=shard_ranks,
        base_memory_bytes=72 * GIB,
    )


def sampler(person):
    session = model(person, 1).session
    with transaction.atomic():
        return sampler_create(
            tenant=person.tenant,
            session_id=session.id,
            seq=None,
            base_model=TINY,
            model_path=None,
            model_id=None,
        )


def test_models_and_samplers_of_a_base_no_worker_holds_go_to_a_sharded_group(people) -> None:
    alice = people[0]
    for name in ("sa", "sb", "sc"):
        start_sharded(name)
    assert BaseModel.objects.get(pk=TINY).memory_bytes == 72 * GIB
    assert Worker.objects.get(name="sa").memory_bytes == 40 * GIB
    first = model(alice, 1)
    assert first.placement == TrainingModel.Placement.PLACED and first.worker.name == "sa"
    group = ReplicaGroup.objects.get()
    assert (group.world_size, group.sharded, group.state) == (2, True, "forming")
    assert members(group.pk) == [("sa", 0), ("sb", 1)]
    # later models join it while its coordinator has room; the follower and the third
    # worker (which cannot form a group alone) take nothing
    for _ in range(3):
        assert model(alice, 1).worker.name == "sa"
    full = model(alice, 1)
    assert full.worker is None
    assert full.placement == TrainingModel.Placement.WAITING_FOR_CAPACITY
    assert "2 workers that serve" in full.status_reason and "shard" in full.status_reason
    # a sampler of the base samples on the group too
    assert sampler(alice).worker.name == "sa"
    # replicas above 1 on a sharded base: refused, naming the field
    with pytest.raises(DomainError) as refused:
        replicas_checked(tenant=alice.tenant, base_model=TINY, replicas=2)
    assert refused.value.field == "replicas" and "sharded" in refused.value.detail
    assert replicas_checked(tenant=alice.tenant, base_model=TINY, replicas=1) == 1


def test_a_sharded_group_is_not_ended_for_want_of_use(people, settings) -> None:
    """Leaving it costs every member a reload of the base: it lasts while its members do."""
    for name in ("sa", "sb"):
        start_sharded(name)
    m = model(people[0], 1, ran=True)
    TrainingModel.objects.filter(pk=m.pk).update(state=TrainingModel.State.UNLOADED)
    ReplicaGroup.objects.update(
        state="ready",
        created_at=timezone.now() - timedelta(seconds=5 * settings.WORKER_LEASE_SECONDS),
    )
    failover.workers_declare_dead(by="janitor")
    assert ReplicaGroup.objects.get().state == "ready"


def test_one_worker_that_must_shard_cannot_serve_alone(people) -> None:
    start_sharded("sa")
    m = model(people[0], 1)
    assert m.worker is None and m.placement == TrainingModel.Placement.WAITING_FOR_WORKER
    assert "waiting for 2 workers that serve" in m.status_reason, m.status_reason
    assert not ReplicaGroup.objects.exists()
    start_sharded("sb")  # a second one: the waiting model is placed on a group of both
    assert placement.models_place_waiting(base_model=TINY) == [m.pk]
    m.refresh_from_db()
    assert m.worker is not None and m.worker.name == "sa"
    assert ReplicaGroup.objects.get().sharded


def test_a_worker_that_holds_the_base_whole_is_preferred(people) -> None:
    for name in ("sa", "sb"):
        start_sharded(name)
    start_sharded("wz", shard_ranks=1)
    assert model(people[0], 1).worker.name == "wz"
    assert not ReplicaGroup.objects.exists()
    # with a whole worker live, replicas are counted over whole workers only
    with pytest.raises(DomainError) as refused:
        replicas_checked(tenant=people[0].tenant, base_model=TINY, replicas=2)
    assert refused.value.field == "replicas" and "1 live worker serves" in refused.value.detail


def test_the_end_of_a_sharded_group_moves_everything_its_coordinator_held(people) -> None:
    alice = people[0]
    for name in ("sa", "sb"):
        start_sharded(name)
    on_group = [model(alice, 1, ran=True) for _ in range(2)]
    base_sampler = sampler(alice)
    group = ReplicaGroup.objects.get()
    start_sharded("wz", shard_ranks=1)  # a whole worker arrives
    moved = failover.group_broken(group.pk, by="worker sa", reason="a collective failed")
    assert moved == 3  # the two models, and the one made for the sampler's session
    for m in on_group:
        m.refresh_from_db()
        assert m.worker.name == "wz"
        assert m.recoveries.get().cause == "group_broken"
    base_sampler.refresh_from_db()
    assert base_sampler.worker.name == "wz"
    assert not Worker.objects.filter(group__isnull=False).exists()


def test_a_registration_names_at_least_one_rank() -> None:
    with pytest.raises(ValueError, match="shard_ranks"), transaction.atomic():
        start_sharded("sa", shard_ranks=0)


def test_a_worker_that_cannot_hold_its_base_registers_to_shard_it(db, tiny_host_factory, tmp_path):
    """Its memory between a whole rank's need and a half-sharded one's: it registers 2 ranks,
    runs nothing until its group is ready, and loads its base whole again after a group."""
    from loopwright.types import Datum, ForwardBackwardInput, ModelInput
    from workers.base_fit import rank_need
    from workers.engine.distributed import RankGroup, is_sharded, shard_base
    from workers.engine.distributed.placement import MIN_PASS_TOKENS
    from workers.engine.host import HostConfig
    from workers.replicated_host import GroupNotReady
    from workers.runtime import WorkerRuntime, WorkerSettings

    host = tiny_host_factory()
    path = host.materialized.path
    whole, half = (rank_need(path, TINY, HostConfig(), n, MIN_PASS_TOKENS) for n in (1, 2))
    settings = WorkerSettings(name="sx", base_model=TINY, memory_bytes=(whole + half) // 2)
    rt = WorkerRuntime(settings, host=host, heartbeat=False)
    worker = Worker.objects.get(name="sx")
    assert (worker.shard_ranks, worker.memory_bytes) == (2, (whole + half) // 2)
    assert BaseModel.objects.get(pk=TINY).memory_bytes == rank_need(path, TINY, HostConfig(), 1)
    assert MIN_PASS_TOKENS <= rt.fit.pass_tokens < HostConfig().max_batch_tokens
    assert rt.replicated("model-any") and rt.engine.is_replicated(None)
    sft = Datum(model_input=ModelInput.from_ints([1, 2]), loss_fn_inputs={"target_tokens": [2, 3]})
    with pytest.raises(GroupNotReady):  # the base's forward too: every call needs the group
        rt.engine.forward(None, ForwardBackwardInput(data=[sft], loss_fn="cross_entropy"))
    group = RankGroup.join(f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        shard_base(rt.host, group)
        assert is_sharded(rt.host)
    finally:
        group.close()
    rt.reload_base()
    assert not is_sharded(rt.host)
    assert rt.engine.host is rt.host and rt.snapshots.host is rt.host


def test_a_whole_worker_is_preferred_only_where_it_can_take_the_model(people) -> None:
    """Not on the session's network, or full: the sharded group serves (the overflow too)."""
    alice = people[0]
    for name in ("sa", "sb"):
        start_sharded(name)
    failover.worker_start(
        by="test", **registration("wv", TINY, capacity=4, subnet_ids=["subnet-0a1b2c3d"])
    )
    assert model(alice, 1).worker.name == "sa"  # wv serves only its VPC
    start_sharded("wz", shard_ranks=1, capacity=1)
    assert model(alice, 1).worker.name == "wz"
    assert model(alice, 1).worker.name == "sa"  # wz is full
    # a sampler of the base: a whole worker first (samplers do not count against capacity)
    assert sampler(alice).worker.name == "wz"


def test_a_sharded_group_has_longer_to_form(people, settings) -> None:
    """Its members load and shard the base meanwhile: SHARDED_GROUP_FORM_SECONDS, not four
    leases."""
    lease = settings.WORKER_LEASE_SECONDS
    settings.SHARDED_GROUP_FORM_SECONDS = 10 * lease
    for name in ("sa", "sb"):
        start_sharded(name)
    model(people[0], 1)
    group = ReplicaGroup.objects.get()
    ReplicaGroup.objects.update(created_at=timezone.now() - timedelta(seconds=5 * lease))
    failover.groups_stuck_forming(by="janitor")
    group.refresh_from_db()
    assert group.state == "forming"
    ReplicaGroup.objects.update(
        created_at=timezone.now() - timedelta(seconds=settings.SHARDED_GROUP_FORM_SECONDS + 1)
    )
    failover.groups_stuck_forming(by="janitor")
    group.refresh_from_db()
    assert group.state == "broken" and group.status_reason == "a member did not join in time"


def test_a_sharded_group_forms_of_workers_alike_in_memory(people) -> None:
    """Each sizes its passes to its memory, and passes in step need them alike."""
    start_sharded("sa", memory=40 * GIB)
    start_sharded("sb", memory=48 * GIB)
    waiting = model(people[0], 1)
    assert waiting.worker is None and not ReplicaGroup.objects.exists()
    start_sharded("sc", memory=48 * GIB)
    assert placement.models_place_waiting(base_model=TINY) == [waiting.pk]
    assert members(ReplicaGroup.objects.get().pk) == [("sb", 0), ("sc", 1)]
