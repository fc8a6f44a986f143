"""Placement of a data-parallel model (``replicas`` > 1): on a replica group of that size.

A model joins a group of its base model and size whose members are all live on its network and
whose coordinator has room; else a new group forms from live workers of that network that are
in no group: the coordinator is the one with room and the fewest models (it also serves
single-worker models), the followers are idle workers (a follower serves only its group). The
model is the coordinator's, like any placed model; until every rank has joined, its operations
wait on the coordinator.
"""

from __future__ import annotations

from controlplane.fleet.models import ReplicaGroup, Worker
from controlplane.fleet.replica_groups import group_form
from controlplane.fleet.services import Network, NoWorkerAvailable, live_workers

from .worker_loads import locked_with_loads


def group_place(*, base_model: str, replicas: int, network: Network) -> Worker:
    """The coordinator of a group of ``replicas`` live workers serving ``base_model`` on
    ``network``: an existing one with room, or one formed now (in the caller's transaction,
    which locks the workers). Raises NoWorkerAvailable with the reason none will do."""
    serving = list(live_workers().filter(base_model_id=base_model).order_by("name"))
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
    joinable = _existing(locked, base_model, replicas, load)
    if joinable is not None:
        return joinable
    free = [w for w in locked if w.group_id is None]
    idle = sorted((w for w in free if load(w) == 0), key=lambda w: w.name)
    busy = sorted((w for w in free if 0 < load(w) < w.capacity), key=lambda w: (load(w), w.name))
    coordinator = busy[0] if busy else (idle[0] if idle else None)
    followers = [w for w in idle if w is not coordinator][: replicas - 1]
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


def _existing(locked: list[Worker], base_model: str, replicas: int, load) -> Worker | None:
    """The coordinator with the most room of a live group of this size whose members are all
    among ``locked`` (live, on the network)."""
    by_group: dict[int, list[Worker]] = {}
    for w in locked:
        if w.group_id is not None:
            by_group.setdefault(w.group_id, []).append(w)
    live = set(
        ReplicaGroup.objects.filter(
            pk__in=list(by_group),
            base_model_id=base_model,
            world_size=replicas,
            state__in=(ReplicaGroup.State.FORMING, ReplicaGroup.State.READY),
        ).values_list("pk", flat=True)
    )
    coordinators = [
        next(w for w in members if w.rank == 0)
        for group_id, members in by_group.items()
        if group_id in live and len(members) == replicas and any(w.rank == 0 for w in members)
    ]
    with_room = [w for w in coordinators if load(w) < w.capacity]
    return min(with_room, key=lambda w: (load(w), w.name)) if with_room else None


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one}" if n == 1 else f"{n} {many}"
