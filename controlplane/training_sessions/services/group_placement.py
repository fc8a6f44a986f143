"""Placement on replica groups: a data-parallel model (``replicas`` > 1) on a group of that
size, and any model or sampler of a base no live worker holds whole on a sharded group.

A model joins a group of its base model and size whose members are all live on its network and
whose coordinator has room; else a new group forms from live workers of that network that are
in no group: the coordinator is the one with room and the fewest models (it also serves
single-worker models), the followers are idle workers (a follower serves only its group). The
model is the coordinator's, like any placed model; until every rank has joined, its operations
wait on the coordinator.

A worker whose memory does not hold its base whole (``Worker.shard_ranks`` > 1) serves only as a
member of a **sharded** group of ``shard_ranks`` such workers: the base is sharded over them,
every model and sampler placed on the coordinator runs on the whole group, and the group lasts
until a member is lost (leaving it costs each member a reload of its base).
"""

from __future__ import annotations

from controlplane.fleet.models import ReplicaGroup, Worker
from controlplane.fleet.replica_groups import group_form
from controlplane.fleet.services import Network, NoWorkerAvailable, placeable_workers

from .worker_loads import locked_with_loads


def group_place(*, base_model: str, replicas: int, network: Network) -> Worker:
    """The coordinator of a group of ``replicas`` live workers serving ``base_model`` on
    ``network``: an existing one with room, or one formed now (in the caller's transaction,
    which locks the workers). Raises NoWorkerAvailable with the reason none will do."""
    serving = list(  # workers that hold the base whole; sharding ones serve only sharded groups
        placeable_workers().filter(base_model_id=base_model, shard_ranks=1).order_by("name")
    )
    fitting = [w for w in serving if network.admits(w)]
    if len(fitting) < replicas:
        cause = (
            NoWorkerAvailable.NO_WORKER if len(serving) < replicas else NoWorkerAvailable.NETWORK
        )
        where = "" if network.is_open else f" on {network.wanted()}"
        raise NoWorkerAvailable(
            base_model,
            f"waiting for {replicas} workers that serve {base_model}{where} to train it on "
            f"{replicas} replicas: {_n(len(fitting), 'is', 'are')} live",
            cause=cause,
        )
    locked, loads = locked_with_loads(fitting)
    load = lambda w: loads.get(w.pk, 0)  # noqa: E731
    joinable = _existing(locked, base_model, replicas, load, sharded=False)
    if joinable is not None:
        return joinable
    free = [w for w in locked if w.group_id is None]
    idle = sorted((w for w in free if load(w) == 0), key=lambda w: w.name)
    busy = sorted((w for w in free if 0 < load(w) < w.capacity), key=lambda w: (load(w), w.name))
    coordinator = busy[0] if busy else (idle[0] if idle else None)
    followers = [  # each will hold every model the coordinator has for the group, and this one
        w for w in idle if w is not coordinator and coordinator and w.capacity > load(coordinator)
    ][: replicas - 1]
    if coordinator is None or len(followers) < replicas - 1:
        raise NoWorkerAvailable(
            base_model,
            f"waiting for {replicas} free workers that serve {base_model} to form a replica "
            f"group: {_n(len(free), 'is', 'are')} in no group, {len(idle)} of them idle "
            "(a follower serves only its group)",
            cause=NoWorkerAvailable.CAPACITY,
        )
    group_form(base_model=base_model, members=[coordinator, *followers])
    return coordinator


def sharded_place(*, base_model: str, network: Network) -> Worker:
    """The coordinator of a sharded group of ``base_model`` on ``network`` with room: an
    existing one, or one formed now from free workers that shard it (in the caller's
    transaction). Raises NoWorkerAvailable with the reason none will do."""
    sharding = list(
        placeable_workers().filter(base_model_id=base_model, shard_ranks__gt=1).order_by("name")
    )
    fitting = [w for w in sharding if network.admits(w)]
    where = "" if network.is_open else f" on {network.wanted()}"
    if not fitting:
        raise NoWorkerAvailable(
            base_model,
            f"waiting for workers that serve {base_model}{where}: none is live",
            cause=NoWorkerAvailable.NETWORK if sharding else NoWorkerAvailable.NO_WORKER,
        )
    locked, loads = locked_with_loads(fitting)
    load = lambda w: loads.get(w.pk, 0)  # noqa: E731
    sizes = sorted({w.shard_ranks for w in locked})
    existing = [_existing(locked, base_model, n, load, sharded=True) for n in sizes]
    with_room = [w for w in existing if w is not None]
    if with_room:
        return min(with_room, key=lambda w: (load(w), w.name))
    # The smallest group that can form, of workers alike in ranks and memory (so that every
    # rank sizes its passes alike, as passes in step need).
    kinds = sorted({(w.shard_ranks, w.memory_bytes or 0) for w in locked})
    for n, memory in kinds:
        free = sorted(
            (
                w
                for w in locked
                if w.group_id is None and w.shard_ranks == n and (w.memory_bytes or 0) == memory
            ),
            key=lambda w: w.name,
        )
        if len(free) >= n:
            group_form(base_model=base_model, members=free[:n], sharded=True)
            return free[0]
    n = sizes[0]
    free = sum(1 for w in locked if w.group_id is None)
    raise NoWorkerAvailable(
        base_model,
        f"waiting for {n} workers that serve {base_model}{where} to shard it over (none holds "
        f"it whole): {_n(len(locked), 'is', 'are')} live, {free} in no group, and every "
        "sharded group is full",
        cause=NoWorkerAvailable.CAPACITY if len(locked) >= n else NoWorkerAvailable.NO_WORKER,
    )


def _existing(
    locked: list[Worker], base_model: str, replicas: int, load, *, sharded: bool
) -> Worker | None:
    """The coordinator with the most room of a live group of this size (and kind) whose members
    are all among ``locked`` (live, on the network)."""
    by_group: dict[int, list[Worker]] = {}
    for w in locked:
        if w.group_id is not None:
            by_group.setdefault(w.group_id, []).append(w)
    live = set(
        ReplicaGroup.objects.filter(
            pk__in=list(by_group),
            base_model_id=base_model,
            world_size=replicas,
            sharded=sharded,
            state__in=(ReplicaGroup.State.FORMING, ReplicaGroup.State.READY),
        ).values_list("pk", flat=True)
    )
    # Every member holds every model of the group: its room is its smallest member's.
    with_room = [
        coordinator
        for group_id, members in by_group.items()
        if group_id in live and len(members) == replicas
        for coordinator in members
        if coordinator.rank == 0 and load(coordinator) < min(w.capacity for w in members)
    ]
    return min(with_room, key=lambda w: (load(w), w.name)) if with_room else None


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one}" if n == 1 else f"{n} {many}"
