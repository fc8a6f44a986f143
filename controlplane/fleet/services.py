"""Worker registration, heartbeats and placement of new models."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from .models import BaseModel, Worker


class NoWorkerAvailable(Exception):
    def __init__(self, base_model: str, reason: str) -> None:
        super().__init__(f"no worker can take a model of {base_model!r} right now: {reason}")
        self.base_model = base_model


@transaction.atomic
def worker_register(
    *,
    name: str,
    queue: str,
    base_model: str,
    description: str,
    context_length: int,
    chat_template: str | None,
    tokenizer_files: dict[str, str],
    tokenizer_path: str,
    capacity: int,
    device: str,
) -> Worker:
    BaseModel.objects.update_or_create(
        name=base_model,
        defaults={
            "description": description,
            "context_length": context_length,
            "chat_template": chat_template,
            "tokenizer_files": tokenizer_files,
            "tokenizer_path": tokenizer_path,
        },
    )
    now = timezone.now()
    worker, _ = Worker.objects.update_or_create(
        name=name,
        defaults={
            "queue": queue,
            "base_model_id": base_model,
            "capacity": capacity,
            "device": device,
            "state": Worker.State.ACTIVE,
            "started_at": now,
            "last_heartbeat_at": now,
        },
    )
    return worker


def worker_heartbeat(*, name: str) -> None:
    Worker.objects.filter(name=name).update(
        last_heartbeat_at=timezone.now(), state=Worker.State.ACTIVE
    )


def worker_retire(*, name: str) -> None:
    Worker.objects.filter(name=name).update(state=Worker.State.GONE)


def live_workers():
    cutoff = timezone.now() - timedelta(seconds=settings.WORKER_STALE_SECONDS)
    return Worker.objects.filter(state=Worker.State.ACTIVE, last_heartbeat_at__gte=cutoff)


def worker_place(*, base_model: str) -> Worker:
    """The live worker serving ``base_model`` with the most free room.

    Runs inside the caller's transaction; the worker row is locked so two placements cannot
    both take its last slot.
    """
    from controlplane.training_sessions.models import TrainingModel

    candidates = (
        live_workers()
        .filter(base_model_id=base_model)
        .annotate(load=Count("models", filter=Q(models__state__in=TrainingModel.LIVE_STATES)))
        .order_by("load", "name")
    )
    if not candidates.exists():
        raise NoWorkerAvailable(base_model, "no live worker serves it")
    for worker in candidates:
        locked = Worker.objects.select_for_update().get(pk=worker.pk)
        load = TrainingModel.objects.filter(
            worker=locked, state__in=TrainingModel.LIVE_STATES
        ).count()
        if load < locked.capacity:
            return locked
    raise NoWorkerAvailable(base_model, "every worker serving it is full")
