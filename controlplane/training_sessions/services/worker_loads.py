"""The workers a placement may choose among, locked, with how many live models each holds."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Count

from controlplane.fleet.models import Worker

from ..models import TrainingModel


def locked_with_loads(workers: Sequence[Worker]) -> tuple[list[Worker], dict[int, int]]:
    """``workers`` locked in one order (by id), so concurrent placements never wait on each
    other in a cycle, and their live models' counts by worker id (absent: none). Inside the
    caller's transaction."""
    locked = list(
        Worker.objects.select_for_update().filter(pk__in=[w.pk for w in workers]).order_by("pk")
    )
    loads = dict(
        TrainingModel.objects.filter(worker__in=locked, state__in=TrainingModel.LIVE_STATES)
        .values_list("worker")
        .annotate(n=Count("id"))
    )
    return locked, loads
