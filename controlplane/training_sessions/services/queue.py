"""The placement queue: a training model no worker can take now waits here instead of failing.
Its order: first in, first out within a tenant; across tenants the next slot of a base model goes
to the tenant that holds the fewest of its slots now (ties: whose waiting model came first), so
no tenant's backlog delays another's first model and tenants that all wait share the slot time.

This module alone writes a model's waiting state (``placement``, ``status_reason``,
``queued_at``, and ``placed_at`` when it leaves for a worker); placement asks it for the order
and reports what became of each model. The queue lives in the database (those fields), so it
survives any restart of the control plane.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count
from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.fleet.services import Network

from ..models import TrainingModel


@dataclass(frozen=True)
class Entry:
    """A waiting model as the order sees it."""

    id: str
    tenant_id: int
    created_at: datetime


def fair_order(entries: Iterable[Entry], held: Mapping[int, int]) -> list[Entry]:
    """``entries`` in the order the queue serves them, given the slots each tenant holds now
    (``held``, by tenant id): each next one is the oldest waiting model of the tenant that would
    hold the fewest slots by then (ties: the oldest such model). A model keeps its place by its
    creation, so one that lost its worker comes back ahead of its tenant's younger ones."""
    mine: dict[int, deque[Entry]] = defaultdict(deque)
    for entry in sorted(entries, key=lambda e: (e.created_at, e.id)):
        mine[entry.tenant_id].append(entry)
    heads = [(held.get(t, 0), q[0].created_at, q[0].id, t) for t, q in mine.items()]
    heapq.heapify(heads)
    order: list[Entry] = []
    while heads:
        holds, _, _, tenant = heapq.heappop(heads)
        queue = mine[tenant]
        order.append(queue.popleft())
        if queue:
            heapq.heappush(heads, (holds + 1, queue[0].created_at, queue[0].id, tenant))
    return order


def held_slots(base_model: str) -> dict[int, int]:
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


def waiting(base_model: str | None = None):
    """The models in the queue (of ``base_model``, or all)."""
    found = TrainingModel.objects.filter(placement__in=TrainingModel.WAITING, worker__isnull=True)
    return found if base_model is None else found.filter(base_model=base_model)


def queue_order(base_model: str) -> list[Entry]:
    """The models waiting for ``base_model`` in the order the queue serves them."""
    rows = waiting(base_model).values_list("id", "tenant_id", "created_at")
    return fair_order([Entry(*row) for row in rows], held_slots(base_model))


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
