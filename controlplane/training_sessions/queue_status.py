"""Where a waiting model or sampler stands in the placement queue (``services/queue.py``): its
position among the creates that wait for the same slots, which capacity it waits on, and when it
is likely to start, learned from how long models of its base model held a slot lately."""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.fleet.services import (
    PLACEABLE_SILENCE,
    Network,
    live_workers,
    placeable_workers,
)
from loopwright.types import QueueStatus

from .models import Operation, SamplingSession, Session, TrainingModel
from .services.queue import hold_seconds, queue_key, queue_order, waiting

NO_ESTIMATE = {
    "worker": "no estimate: it waits for a worker of its base model to start",
    "network": "no estimate: it waits for a worker that reaches its network to start",
}
WAITS_FOR = {
    TrainingModel.Placement.WAITING_FOR_CAPACITY: "capacity",
    TrainingModel.Placement.WAITING_FOR_WORKER: "worker",
    TrainingModel.Placement.WAITING_FOR_NETWORK: "network",
}


def model_queue_status(model: TrainingModel, *, now: datetime | None = None) -> QueueStatus | None:
    """``model``'s place in the queue; None unless it is live and waits for a worker."""
    if (
        model.worker_id is not None
        or model.placement not in TrainingModel.WAITING
        or model.state not in TrainingModel.LIVE_STATES
    ):
        return None
    now = now or timezone.now()
    key = queue_key(model)
    rivals = {
        m.id
        for m in waiting(model.base_model).select_related("session")
        if m.id == model.id or queue_key(m) == key
    }
    order = [entry.id for entry in queue_order(model.base_model) if entry.id in rivals]
    position = order.index(model.id) + 1 if model.id in order else len(order) + 1
    waits_for = WAITS_FOR[model.placement]
    if waits_for != "capacity":
        start, basis = None, NO_ESTIMATE[waits_for]
    elif model.replicas > 1:
        start, basis = None, f"no estimate for a group of {model.replicas} workers"
    else:
        start, basis = start_estimate(model.base_model, key[1], position, now)
    return QueueStatus(
        position=position,
        waiting=len(order),
        waits_for=waits_for,
        base_model=model.base_model,
        network=key[1].words(),
        replicas=model.replicas,
        reason=model.status_reason,
        queued_at=model.queued_at,
        estimated_start_at=start,
        estimate_basis=basis,
        kind="model",
    )


def start_estimate(
    base_model: str, network: Network, position: int, now: datetime
) -> tuple[datetime | None, str]:
    """When the ``position``-th model waiting for a slot of ``base_model`` on ``network`` is
    likely to start: every slot of the workers it may use frees once its model has held it the
    mean hold time (at once if free), and each freed slot goes to the next in line."""
    learned = hold_seconds(base_model)
    if learned is None:
        return None, f"no estimate yet: no model of {base_model} has ended here"
    hold, count = learned
    workers = [
        w
        for w in live_workers().filter(base_model_id=base_model, shard_ranks=1)
        if not w.rank and network.admits(w)
    ]
    frees = _slot_free_times(workers, hold, now)
    if not frees:
        return None, "no estimate: no live worker it may use holds the base model whole"
    heapq.heapify(frees)
    start = now
    for _ in range(position):
        start = heapq.heappop(frees)
        heapq.heappush(frees, start + timedelta(seconds=hold))
    slots = "1 slot" if len(frees) == 1 else f"{len(frees)} slots"
    basis = (
        f"models of {base_model} held a slot {hold:.0f} s on average (the last {count} that "
        f"ended); {slots} on the workers it may use"
    )
    return max(start, now), basis


def _slot_free_times(workers: list[Worker], hold: float, now: datetime) -> list[datetime]:
    """When each slot of ``workers`` is expected free: now if nobody holds it, else once its
    model has held it ``hold`` seconds (now, if it already has)."""
    held: dict[int, list[datetime]] = {}
    for worker_id, placed_at in TrainingModel.objects.filter(
        worker__in=workers, state__in=TrainingModel.LIVE_STATES
    ).values_list("worker_id", "placed_at"):
        held.setdefault(worker_id, []).append(placed_at or now)
    frees: list[datetime] = []
    for w in workers:
        taken = sorted(max(now, p + timedelta(seconds=hold)) for p in held.get(w.pk, []))
        frees += taken[: w.capacity] + [now] * max(w.capacity - len(taken), 0)
    return frees


# -- samplers --------------------------------------------------------------------------------
def sampler_queue_status(sampler: SamplingSession) -> QueueStatus | None:
    """``sampler``'s place while no worker takes it (its base model's workers are gone, or none
    reaches its session's network); a sampler of a live model waits with that model."""
    if sampler.worker_id is not None or sampler.session.state not in Session.LIVE_STATES:
        return None
    if sampler.live_model_id is not None:
        model = TrainingModel.objects.select_related("session").get(pk=sampler.live_model_id)
        return model_queue_status(model)
    network = Network.of(sampler.session.platform.get("vpc_config"))
    rivals = [
        s
        for s in SamplingSession.objects.filter(
            base_model=sampler.base_model,
            worker__isnull=True,
            live_model__isnull=True,
            session__state__in=Session.LIVE_STATES,
        )
        .select_related("session")
        .order_by("created_at", "id")
        if Network.of(s.session.platform.get("vpc_config")) == network
    ]
    ids = [s.id for s in rivals]
    waits_for, reason = sampler_wait_reason(sampler.base_model, network)
    return QueueStatus(
        position=ids.index(sampler.id) + 1 if sampler.id in ids else len(ids) + 1,
        waiting=len(ids),
        waits_for=waits_for,
        base_model=sampler.base_model,
        network=network.words(),
        replicas=1,
        reason=reason,
        queued_at=sampler.created_at,
        estimate_basis=NO_ESTIMATE[waits_for],
        kind="sampler",
    )


def sampler_wait_reason(base_model: str, network: Network) -> tuple[str, str]:
    """Why a sampler of ``base_model`` on ``network`` has no worker: none serves the base
    ("worker": none is live, or those live have been silent too long for placement), or none
    of those reaches the network ("network")."""
    serving = list(placeable_workers().filter(base_model_id=base_model))
    if not serving:
        silent = live_workers().filter(base_model_id=base_model).count()
        if silent:
            have = f"{silent} live one has" if silent == 1 else f"{silent} live ones have"
            why = f"{have} not renewed its lease for over {PLACEABLE_SILENCE:.0%} of it"
        else:
            why = "none is live"
        return "worker", f"waiting for a worker that serves {base_model}: {why}"
    n = len(serving)
    serve = f"{n} worker serves" if n == 1 else f"{n} workers serve"
    return "network", (
        f"waiting for {network.wanted()}: {serve} {base_model}, {network.mismatch(serving)}"
    )


def operation_queue_status(op: Operation) -> QueueStatus | None:
    """The queue place of what a pending operation waits on: its model, or its sampler."""
    if op.model_id is not None:
        model = TrainingModel.objects.select_related("session").get(pk=op.model_id)
        return model_queue_status(model)
    if op.sampling_session_id is not None and op.worker_id is None:
        sampler = SamplingSession.objects.select_related("session").get(pk=op.sampling_session_id)
        return sampler_queue_status(sampler)
    return None


def operation_queue_state(op: Operation) -> tuple[str, str | None, QueueStatus | None]:
    """How a pending operation waits (the tinker protocol's ``queue_state`` and its reason), and
    the queue place of its model or sampler when that waits for a worker."""
    status = operation_queue_status(op)
    if status is not None:
        return "paused_capacity", summary(status), status
    if op.model_id is None and op.worker_id is None:  # its sampler's session ended meanwhile
        return "paused_capacity", "waiting for a live worker that serves its base model", None
    return "active", None, None


def summary(status: QueueStatus) -> str:
    """A queue place in one line, for people: why it waits, its place, and its likely start."""
    words = f"{status.reason} ({_ordinal(status.position)} of {status.waiting} in line"
    if status.estimated_start_at is not None:
        words += f"; likely to start around {status.estimated_start_at:%Y-%m-%d %H:%M:%S} UTC"
    return words + ")"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
