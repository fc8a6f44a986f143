"""The placement queue: where a create that no worker can take now stands while it waits."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from ._base import ResponseModel

__all__ = ["QueueStatus", "WaitsFor"]

WaitsFor = Literal["capacity", "worker", "network"]
"""What a queued create waits for: a free slot on a worker that could take it ("capacity"),
any live worker serving its base model ("worker"), or one that reaches its session's VPC
subnets with its security groups ("network")."""


class QueueStatus(ResponseModel):
    """A waiting model's or sampler's place in the placement queue."""

    position: int
    """1 is the next to start when what it waits for frees up; the creates ahead of it wait for
    the same slots. It can grow: another account's first session goes ahead of an account that
    already holds slots (the queue is fair across accounts, first in, first out within one)."""

    waiting: int
    """How many creates wait for the same slots, itself included."""

    waits_for: WaitsFor
    """Which capacity it waits on."""

    base_model: str
    """The base model whose workers it waits for."""

    network: str
    """The network those workers must reach: "open network", or the session's VPC subnets and
    security groups in words."""

    replicas: int
    """Workers it needs at once (a data-parallel model's replica group); samplers need one."""

    reason: str
    """Why it waits, for people (the same words as ``status_reason``)."""

    queued_at: datetime | None = None
    """When it joined the queue."""

    estimated_start_at: datetime | None = None
    """When it is likely to start, from how long models of its base model have held a slot
    lately; None when there is nothing to go by (no such model has ended yet, or it waits for a
    worker or network that no live worker offers)."""

    estimate_basis: str | None = None
    """How ``estimated_start_at`` was worked out, or why there is none, for people."""

    kind: Literal["model", "sampler"] = "model"
    """What waits: a training model (its create_model future) or a sampler (its samples)."""
