"""Placement: a training model runs on a live worker that serves its base model, matches its
session's network and has room. Until one does, the model waits (with the reason) and its
operations queue up; waiting models are placed oldest first when workers register or heartbeat
and in the janitor's pass, one model per transaction.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from controlplane import dispatch
from controlplane.fleet.models import Worker
from controlplane.fleet.services import Network, NoWorkerAvailable, live_workers

from ..models import Operation, Recovery, SamplingSession, Session, TrainingModel
from .group_placement import group_place, sharded_place
from .recovery import recovery_discard
from .worker_loads import locked_with_loads

log = logging.getLogger(__name__)

WAITING_FOR = {
    NoWorkerAvailable.NO_WORKER: TrainingModel.Placement.WAITING_FOR_WORKER,
    NoWorkerAvailable.NETWORK: TrainingModel.Placement.WAITING_FOR_NETWORK,
    NoWorkerAvailable.CAPACITY: TrainingModel.Placement.WAITING_FOR_CAPACITY,
}


def worker_place(*, base_model: str, network: Network | None = None) -> Worker:
    """The live worker serving ``base_model`` on ``network`` with the most free room; for a
    base no live worker holds whole, the coordinator of a sharded group (``sharded_place``).

    Runs inside the caller's transaction; the worker rows are locked so two placements cannot
    both take a last slot. Raises NoWorkerAvailable with the reason none will do.
    """
    network = network or Network()
    live = list(live_workers().filter(base_model_id=base_model).order_by("name"))
    whole = [w for w in live if w.shard_ranks == 1]
    if any(w.shard_ranks > 1 and network.admits(w) for w in live):
        try:  # a worker that holds the base whole first; else a sharded group
            return _whole_place(base_model, network, whole)
        except NoWorkerAvailable:
            return sharded_place(base_model=base_model, network=network)
    return _whole_place(base_model, network, whole)


def _whole_place(base_model: str, network: Network, whole: list[Worker]) -> Worker:
    serving = [w for w in whole if not w.rank]  # a follower of a replica group serves only it
    if not serving:
        raise NoWorkerAvailable(
            base_model,
            f"waiting for a worker that serves {base_model}: none is live",
            cause=NoWorkerAvailable.NO_WORKER,
        )
    wanted = network.wanted()
    fitting = [w for w in serving if network.admits(w)]
    if not fitting:
        serve = _n(len(serving), "worker serves", "workers serve")
        raise NoWorkerAvailable(
            base_model,
            f"waiting for {wanted}: {serve} {base_model}, {network.mismatch(serving)}",
            cause=NoWorkerAvailable.NETWORK,
        )
    locked, loads = locked_with_loads(fitting)  # then the one with the most room wins
    with_room = [w for w in locked if loads.get(w.pk, 0) < w.capacity]
    if with_room:
        return min(with_room, key=lambda w: (loads.get(w.pk, 0), w.name))
    full = "it is full" if len(fitting) == 1 else "all are full"
    raise NoWorkerAvailable(
        base_model,
        f"waiting for a free slot on {wanted}: {_n(len(fitting), 'serves', 'serve')} "
        f"{base_model}, {full}",
        cause=NoWorkerAvailable.CAPACITY,
    )


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def session_network(session: Session) -> Network:
    return Network.of(session.platform.get("vpc_config"))


def models_place_waiting(*, base_model: str | None = None) -> list[str]:
    """Place the waiting models (of ``base_model``, or all) that a worker can take now, oldest
    first; the others get the current reason they wait. Returns the ids placed."""
    waiting = TrainingModel.objects.filter(
        placement__in=TrainingModel.WAITING, worker__isnull=True
    ).order_by("created_at", "id")
    if base_model is not None:
        waiting = waiting.filter(base_model=base_model)
    placed: list[str] = []
    # Once a (base model, network) finds no worker, younger models asking the same wait too:
    # they neither query again nor take a slot an older one could not.
    refused: dict[tuple, NoWorkerAvailable] = {}
    for model_id in list(waiting.values_list("id", flat=True)):
        with transaction.atomic():
            if _place_one(model_id, refused):
                placed.append(model_id)
    if placed:
        log.debug("placed %s", ", ".join(placed))
    return placed


def _place_one(model_id: str, refused: dict[tuple, NoWorkerAvailable]) -> bool:
    # skip_locked: a model being unloaded or placed by someone else is left to them
    model = (
        TrainingModel.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("session")
        .filter(pk=model_id, placement__in=TrainingModel.WAITING, worker__isnull=True)
        .first()
    )
    return model is not None and _place(model, refused)


def model_place_new(model: TrainingModel) -> bool:
    """Place a model just created (in the caller's transaction), or have it wait: when no worker
    can take it, or behind an older model of its base model and network that waits for a slot."""
    network = session_network(model.session)
    older = (
        TrainingModel.objects.filter(
            placement=TrainingModel.Placement.WAITING_FOR_CAPACITY,
            worker__isnull=True,
            base_model=model.base_model,
            created_at__lte=model.created_at,
            replicas=model.replicas,
        )
        .exclude(pk=model.pk)
        .select_related("session")
        .order_by("created_at", "id")
    )
    ahead = next((m for m in older if session_network(m.session) == network), None)
    if ahead is not None:  # the next pass places the older one first
        _wait(model, ahead.placement, ahead.status_reason)
        return False
    return _place(model, {})


def _place(model: TrainingModel, refused: dict[tuple, NoWorkerAvailable]) -> bool:
    key = (model.base_model, session_network(model.session), model.replicas)
    why = refused.get(key)
    if why is None:
        try:
            if model.replicas > 1:
                worker = group_place(
                    base_model=model.base_model, replicas=model.replicas, network=key[1]
                )
            else:
                worker = worker_place(base_model=model.base_model, network=key[1])
        except NoWorkerAvailable as exc:
            why = refused[key] = exc
        else:
            _assign(model, worker)
            return True
    _wait(model, WAITING_FOR[why.cause], why.reason)
    return False


def _wait(model: TrainingModel, placement: str, reason: str) -> None:
    if (model.placement, model.status_reason) != (placement, reason):
        model.placement, model.status_reason = placement, reason
        model.save(update_fields=["placement", "status_reason"])


def model_place(model: TrainingModel, refused: dict | None = None) -> bool:
    """Place a model that has no worker (the caller holds its row lock), or have it wait with
    the reason; ``refused`` remembers the (base model, network) pairs no worker took."""
    return _place(model, {} if refused is None else refused)


def _assign(model: TrainingModel, worker: Worker) -> None:
    """The model is the worker's; its queued operations, and the samplers that sample from its
    live weights with theirs, go to the worker's queue after commit."""
    model.worker = worker
    model.placement = TrainingModel.Placement.PLACED
    model.status_reason = ""
    model.placed_at = timezone.now()
    model.save(update_fields=["worker", "placement", "status_reason", "placed_at"])
    model.operations.filter(worker__isnull=True).update(worker=worker)
    samplers = SamplingSession.objects.filter(live_model=model)
    samplers.update(worker=worker)
    Operation.objects.filter(
        sampling_session__in=samplers, worker__isnull=True, status=Operation.Status.PENDING
    ).update(worker=worker)
    dispatch.wake_worker(worker.queue)


def takes_samplers(worker: Worker) -> bool:
    """Whether samplers of its base may run on ``worker``: one that holds the base whole and is
    no follower, or the coordinator of a sharded group."""
    return worker.rank == 0 if worker.shard_ranks > 1 else not worker.rank


def served_capabilities() -> dict[str, tuple[bool, bool]]:
    """Per base model a live worker serves: whether training models can be placed on its live
    workers now (one with room for training models, or enough sharding workers for a group),
    and whether samplers can (a worker that takes them, or such a group)."""
    live = list(live_workers().only("base_model_id", "capacity", "rank", "shard_ranks"))
    found: dict[str, tuple[bool, bool]] = {}
    for name in sorted({w.base_model_id for w in live}):
        serving = [w for w in live if w.base_model_id == name]
        sharding = [w for w in serving if w.shard_ranks > 1]
        groups = bool(sharding) and len(sharding) >= min(w.shard_ranks for w in sharding)
        whole = [w for w in serving if w.shard_ranks <= 1]
        trainable = groups or any(w.capacity > 0 for w in whole)
        found[name] = (trainable, groups or any(takes_samplers(w) for w in whole))
    return found


def sharded_home(base_model: str, network: Network, live: list[Worker]) -> Worker | None:
    """The coordinator of a sharded group a sampler of ``base_model`` can run on (the one with
    the fewest samplers, or one formed now), None if no such group can serve it yet."""
    sharding = [w for w in live if w.shard_ranks > 1 and network.admits(w)]
    coordinators = [w for w in sharding if w.rank == 0]
    if coordinators:  # samplers do not count against a worker's capacity
        return _fewest_samplers(coordinators)
    if not sharding:
        return None
    try:
        with transaction.atomic():
            return sharded_place(base_model=base_model, network=network)
    except NoWorkerAvailable:
        return None


def sampler_home(sampler: SamplingSession) -> Worker | None:
    """Where a sampler's requests run: with its live model, or any live worker of its base model
    on its session's network (the one with the fewest samplers); None while there is none."""
    if sampler.live_model_id is not None:
        return TrainingModel.objects.get(pk=sampler.live_model_id).worker
    network = session_network(sampler.session)
    live = list(live_workers().filter(base_model_id=sampler.base_model))
    serving = [w for w in live if w.shard_ranks == 1 and network.admits(w) and takes_samplers(w)]
    if not serving:  # none holds the base whole here: a sharded group, if one can serve it
        return sharded_home(sampler.base_model, network, live)
    return _fewest_samplers(serving)


def _fewest_samplers(workers: list[Worker]) -> Worker:
    """The worker with the fewest samplers (then the first by name)."""
    loads = dict(
        SamplingSession.objects.filter(worker__in=workers)
        .values_list("worker")
        .annotate(n=Count("id"))
    )
    return min(workers, key=lambda w: (loads.get(w.pk, 0), w.name))


def sampler_move(sampler: SamplingSession, worker: Worker | None) -> None:
    """Point the sampler and its queued requests at ``worker`` (None: they wait for one)."""
    sampler.worker = worker
    sampler.save(update_fields=["worker"])
    Operation.objects.filter(sampling_session=sampler, status=Operation.Status.PENDING).update(
        worker=worker
    )
    if worker is not None:
        dispatch.wake_worker(worker.queue)


def samplers_place_waiting(*, base_model: str | None = None) -> list[str]:
    """Samplers that wait for a worker (theirs was lost while none else served their base
    model) and can have one now; returns their ids."""
    waiting = SamplingSession.objects.filter(
        worker__isnull=True, session__state__in=Session.LIVE_STATES
    ).select_related("session")
    if base_model is not None:
        waiting = waiting.filter(base_model=base_model)
    placed = []
    for sampler in waiting:
        with transaction.atomic():
            home = sampler_home(sampler)
            if home is not None:
                sampler_move(sampler, home)
                placed.append(sampler.id)
    return placed


def model_end_waiting(model: TrainingModel) -> None:
    """A model that ends before any worker took it (unload, stop, idle expiry): its queued
    operations fail and it is unloaded at once; nothing reaches a worker. The caller holds the
    model's row lock."""
    reason = model.status_reason or "waiting for a worker"
    error = f"model {model.id} ended while {reason}; its queued operations did not run"
    pending = list(
        model.operations.filter(status=Operation.Status.PENDING).values_list("id", flat=True)
    )
    Operation.objects.filter(pk__in=pending).update(
        status=Operation.Status.FAILED,
        error=error,
        error_category="user",
        finished_at=timezone.now(),
    )
    model.state = TrainingModel.State.UNLOADED
    model.placement = TrainingModel.Placement.NEVER_PLACED
    model.status_reason = f"ended while {reason}"
    model.save(update_fields=["state", "placement", "status_reason"])
    recovery_discard(model)
    model.recoveries.filter(outcome=Recovery.Outcome.RESTORING).update(
        outcome=Recovery.Outcome.ENDED
    )
