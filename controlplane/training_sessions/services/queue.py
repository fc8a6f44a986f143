"""The placement queue: a training model no worker can take now waits here instead of failing.
Its order: first in, first out within a tenant; across tenants the next slot of a base model goes
to the tenant with the least slot time of it: what its models held over the last hour, plus what
the slots it holds now are likely to take still (a mean hold each). So no tenant's backlog delays
another's first model (that one has had none), and tenants that all wait share the slot time.

This module alone writes a model's waiting state (``placement``, ``status_reason``,
``queued_at``, and ``placed_at`` when it leaves for a worker); placement asks it for the order
and reports what became of each model. The queue lives in the database (those fields), so it
survives any restart of the control plane.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.fleet.services import Network

from ..models import TrainingModel

USAGE_WINDOW = timedelta(hours=1)  # the slot time the order counts
HISTORY = 50  # the most recent ended models of a base model its mean hold is learned from


@dataclass(frozen=True)
class Entry:
    """A waiting model as the order sees it."""

    id: str
    tenant_id: Hashable  # the tenant's primary key
    created_at: datetime


def fair_order(
    entries: Iterable[Entry],
    held: Mapping[Hashable, int],
    used: Mapping[Hashable, float] | None = None,
    hold: float = 0.0,
) -> list[Entry]:
    """``entries`` in the order the queue serves them, given the slots each tenant holds now
    (``held``), the slot seconds it had lately (``used``), by tenant id, and the seconds a model
    is likely to hold a slot (``hold``): each next one is the oldest waiting model of the tenant
    whose slot time (``used``, plus ``hold`` for each slot it holds or takes by then) is least
    (ties: fewer slots, then the oldest model). A model keeps its place by its creation, so one
    that lost its worker comes back ahead of its tenant's younger ones."""
    used = used or {}
    mine: dict[Hashable, deque[Entry]] = defaultdict(deque)
    for entry in sorted(entries, key=lambda e: (e.created_at, e.id)):
        mine[entry.tenant_id].append(entry)

    def head(tenant: Hashable, slots: int) -> tuple:
        first = mine[tenant][0]
        return (used.get(tenant, 0.0) + slots * hold, slots, first.created_at, first.id, tenant)

    heads = [head(t, held.get(t, 0)) for t in mine]
    heapq.heapify(heads)
    order: list[Entry] = []
    while heads:
        _, slots, _, _, tenant = heapq.heappop(heads)
        order.append(mine[tenant].popleft())
        if mine[tenant]:
            heapq.heappush(heads, head(tenant, slots + 1))
    return order


def held_slots(base_model: str) -> dict[Hashable, int]:
    """The slots of ``base_model`` each tenant holds now: its live models placed on a worker."""
    return dict(
        TrainingModel.objects.filter(
            base_model=base_model,
            worker__isnull=False,
            state__in=TrainingModel.LIVE_STATES,
        )
        .values_list("tenant_id")
        .annotate(n=Count("id"))
    )


def slot_seconds(base_model: str, now: datetime | None = None) -> dict[Hashable, float]:
    """The slot seconds of ``base_model`` each tenant's models held in the last
    ``USAGE_WINDOW`` (from their placement to their end, or now)."""
    now = now or timezone.now()
    since = now - USAGE_WINDOW
    used: dict[Hashable, float] = defaultdict(float)
    for tenant_id, placed_at, ended_at in (
        TrainingModel.objects.filter(base_model=base_model, placed_at__isnull=False)
        .filter(
            Q(ended_at__gte=since)
            | Q(ended_at__isnull=True, worker__isnull=False, state__in=TrainingModel.LIVE_STATES)
        )
        .values_list("tenant_id", "placed_at", "ended_at")
    ):
        span = (min(ended_at or now, now) - max(placed_at, since)).total_seconds()
        used[tenant_id] += max(span, 0.0)
    return dict(used)


def waiting(base_model: str | None = None):
    """The models in the queue (of ``base_model``, or all)."""
    found = TrainingModel.objects.filter(placement__in=TrainingModel.WAITING, worker__isnull=True)
    return found if base_model is None else found.filter(base_model=base_model)


def queue_order(base_model: str) -> list[Entry]:
    """The models waiting for ``base_model`` in the order the queue serves them."""
    rows = waiting(base_model).values_list("id", "tenant_id", "created_at")
    entries = [Entry(*row) for row in rows]
    if not entries:
        return []
    learned = hold_seconds(base_model)
    return fair_order(
        entries,
        held_slots(base_model),
        slot_seconds(base_model),
        learned[0] if learned else 0.0,
    )


def hold_seconds(base_model: str) -> tuple[float, int] | None:
    """The mean seconds the last ``HISTORY`` ended models of ``base_model`` held their slot
    (from placement to their end) and how many there were; None before any ended."""
    spans = list(
        TrainingModel.objects.filter(
            base_model=base_model, ended_at__isnull=False, placed_at__isnull=False
        )
        .order_by("-ended_at")
        .values_list("placed_at", "ended_at")[:HISTORY]
    )
    if not spans:
        return None
    total = sum(max((end - start).total_seconds(), 0.0) for start, end in spans)
    return total / len(spans), len(spans)


def in_order(base_model: str | None = None) -> list[str]:
    """The ids of the waiting models (of ``base_model``, or all) in the order they are served:
    each base model's queue in its order, the base models by name."""
    bases = (
        [base_model]
        if base_model is not None
        else sorted(set(waiting().values_list("base_model", flat=True)))
    )
    return [entry.id for base in bases for entry in queue_order(base)]


def queue_key(model: TrainingModel) -> tuple[str, Network, int]:
    """What a model waits for: a slot of its base model on its session's network, on one worker
    or on a group of ``replicas``. Models with one key compete for the same slots."""
    return (model.base_model, Network.of(model.session.platform.get("vpc_config")), model.replicas)


def first_ahead(model: TrainingModel) -> TrainingModel | None:
    """The first model the queue serves before ``model`` that waits for a slot of the same kind
    (``queue_key``); None if ``model`` is next for such a slot."""
    ahead = []
    for entry in queue_order(model.base_model):
        if entry.id == model.id:
            break
        ahead.append(entry.id)
    if not ahead:
        return None
    found = {
        m.id: m
        for m in TrainingModel.objects.filter(
            pk__in=ahead, placement=TrainingModel.Placement.WAITING_FOR_CAPACITY
        ).select_related("session")
    }
    key = queue_key(model)
    return next((found[i] for i in ahead if i in found and queue_key(found[i]) == key), None)


def model_wait(model: TrainingModel, placement: str, reason: str) -> None:
    """``model`` waits (it joins the queue now, or waits on with a new reason)."""
    fields = {"placement": placement, "status_reason": reason}
    if model.queued_at is None or model.placement not in TrainingModel.WAITING:
        fields["queued_at"] = timezone.now()
    changed = [name for name, value in fields.items() if getattr(model, name) != value]
    for name in changed:
        setattr(model, name, fields[name])
    if changed:
        model.save(update_fields=changed)


def model_leave_placed(model: TrainingModel, worker: Worker) -> None:
    """``model`` leaves the queue for ``worker`` (the caller moves its work there)."""
    model.worker = worker
    model.placement = TrainingModel.Placement.PLACED
    model.status_reason = ""
    model.placed_at = timezone.now()
    model.save(update_fields=["worker", "placement", "status_reason", "placed_at"])


def model_leave_ended(model: TrainingModel) -> str:
    """``model`` leaves the queue because it ended before any worker took it (unloaded, its
    session stopped or expired). Returns why it had waited."""
    reason = model.status_reason or "waiting for a worker"
    model.placement = TrainingModel.Placement.NEVER_PLACED
    model.status_reason = f"ended while {reason}"
    model.save(update_fields=["placement", "status_reason"])
    return reason


def model_requeue(model: TrainingModel, reason: str) -> None:
    """``model`` lost its worker (dead, restarted, stopped, or its group broke): it is back in
    the queue, at the place its creation gives it, until placement finds it another."""
    model.worker = None
    model.save(update_fields=["worker"])
    model_wait(model, TrainingModel.Placement.WAITING_FOR_WORKER, reason)
