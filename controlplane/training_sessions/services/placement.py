"""Placement: a training model runs on a live worker that serves its base model, matches its
session's network and has room. Until one does, the model waits in the placement queue
(``queue``: with the reason, fair across tenants) and its operations queue up; waiting models
are placed in the queue's order when workers register, heartbeat or leave and in the janitor's
pass, one model per transaction.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from controlplane import dispatch
from controlplane.fleet.models import Worker
from controlplane.fleet.services import (
    PLACEABLE_SILENCE,
    Network,
    NoWorkerAvailable,
    live_workers,
    placeable_workers,
)

from .. import operation_states as states
from ..models import Operation, Recovery, SamplingSession, Session, TrainingModel
from . import queue
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

    Only workers heard from lately are chosen (``fleet.services.placeable_workers``: silent for
    no more than ``PLACEABLE_SILENCE`` of the lease), a fresh one first among those with room.
    Runs inside the caller's transaction; the worker rows are locked so two placements cannot
    both take a last slot. Raises NoWorkerAvailable with the reason none will do.
    """
    network = network or Network()
    live = list(placeable_workers().filter(base_model_id=base_model).order_by("name"))
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
            f"waiting for a worker that serves {base_model}: {_none_heard(base_model)}",
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
    fresh = {w.pk for w in fitting if w.fresh}
    locked, loads = locked_with_loads(fitting)  # then a fresh one with the most room wins
    with_room = [w for w in locked if loads.get(w.pk, 0) < w.capacity]
    if with_room:
        return min(with_room, key=lambda w: (w.pk not in fresh, loads.get(w.pk, 0), w.name))
    full = "it is full" if len(fitting) == 1 else "all are full"
    raise NoWorkerAvailable(
        base_model,
        f"waiting for a free slot on {wanted}: {_n(len(fitting), 'serves', 'serve')} "
        f"{base_model}, {full}",
        cause=NoWorkerAvailable.CAPACITY,
    )


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _none_heard(base_model: str) -> str:
    """Why no worker of ``base_model`` can be chosen: none is live, or those live have been
    silent too long (they may be gone; placement waits for them to beat again, or for their
    lease to run out)."""
    live = live_workers().filter(base_model_id=base_model, shard_ranks=1).exclude(rank__gt=0)
    silent = live.count()
    if not silent:
        return "none is live"
    have = _n(silent, "live one has", "live ones have")
    return f"{have} not renewed its lease for over {PLACEABLE_SILENCE:.0%} of it"


def session_network(session: Session) -> Network:
    return Network.of(session.platform.get("vpc_config"))


def models_place_waiting(*, base_model: str | None = None) -> list[str]:
    """Place the waiting models (of ``base_model``, or all) that a worker can take now, in the
    queue's order; the others get the current reason they wait. Returns the ids placed."""
    placed: list[str] = []
    # Once a (base model, network, replicas) finds no worker, the models after it asking the
    # same wait too: they neither query again nor take a slot one before them could not.
    refused: dict[tuple, NoWorkerAvailable] = {}
    for model_id in queue.in_order(base_model):
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
    can take it, or behind a model the queue serves first that waits for the same slots."""
    ahead = queue.first_ahead(model)
    if ahead is not None:  # the next pass places that one first
        _wait(model, ahead.placement, ahead.status_reason)
        return False
    return _place(model, {})


def _place(model: TrainingModel, refused: dict[tuple, NoWorkerAvailable]) -> bool:
    key = queue.queue_key(model)
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
    queue.model_wait(model, placement, reason)


def _assign(model: TrainingModel, worker: Worker) -> None:
    """The model is the worker's; its queued operations, and the samplers that sample from its
    live weights with theirs, go to the worker's queue after commit."""
    queue.model_leave_placed(model, worker)
    states.place_with_model(model, worker)
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
        home = states.sampler_home_id(sampler)
        return None if home is None else Worker.objects.get(pk=home)
    network = session_network(sampler.session)
    live = list(placeable_workers().filter(base_model_id=sampler.base_model))
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
    states.move_with_sampler(sampler, worker)
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
    reason = queue.model_leave_ended(model)
    error = f"model {model.id} ended while {reason}; its queued operations did not run"
    pending = list(
        model.operations.filter(status=Operation.Status.PENDING).values_list("id", flat=True)
    )
    states.fail(Operation.objects.filter(pk__in=pending), error, "user")
    model.state = TrainingModel.State.UNLOADED
    model.ended_at = timezone.now()
    model.save(update_fields=["state", "ended_at"])
    recovery_discard(model)
    model.recoveries.filter(outcome=Recovery.Outcome.RESTORING).update(
        outcome=Recovery.Outcome.ENDED
    )


def samplers_end_waiting(session: Session) -> int:
    """The session ended: its samplers that waited for a worker leave the queue, and their
    queued samples fail (nothing reaches a worker). Returns how many samples failed."""
    waiting = SamplingSession.objects.filter(session=session, worker__isnull=True)
    return states.fail(
        Operation.objects.filter(
            sampling_session__in=waiting, status=Operation.Status.PENDING, worker__isnull=True
        ),
        f"session {session.id} ended while its sampler waited for a worker; "
        "this request did not run",
        "user",
    )
