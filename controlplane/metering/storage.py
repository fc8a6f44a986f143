"""The storage meter: checkpoint storage in millionths of a GB-month (10^9 bytes kept for 720
hours), billed per closed UTC hour from the spans each checkpoint was stored (``StoredObject``,
kept by the checkpoint's saves and deletion), each hour exactly once."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.training_sessions.models import Checkpoint, TrainingModel

from .models import Meter, MeterCursor, StorageAccrual, StoredObject, UsageRecord
from .rollup import usage_rows_write

GIGABYTE = 10**9
MONTH_HOURS = 720  # a GB-month is a gigabyte kept 720 hours (as Tinker's storage rate is)
# byte-microseconds in one unit of the meter, a millionth of a GB-month (the same number as the
# byte-seconds in a GB-month)
UNIT = GIGABYTE * MONTH_HOURS * 3600
CURSOR = "storage"
MAX_HOURS = 24 * 7  # hours billed per run at most; the rest on the next runs
_HOUR = timedelta(hours=1)

_clock = timezone.now  # when a checkpoint is stored or deleted (tests move it)


def stored_bytes(ckpt: Checkpoint) -> int:
    """What a checkpoint keeps in storage: its stored (sealed) objects' sizes, else the size of
    its files as saved."""
    manifest = ckpt.manifest if isinstance(ckpt.manifest, dict) else {}
    sizes = [int(entry.get("size") or 0) for entry in manifest.values() if isinstance(entry, dict)]
    return sum(sizes) if sizes else int(ckpt.size_bytes or 0)


def checkpoint_stored(ckpt: Checkpoint) -> None:
    """``ckpt`` was saved (or saved again to its path): its span starts now."""
    now = _clock()
    checkpoint_gone(ckpt.pk, at=now)
    session_id = (
        TrainingModel.objects.filter(pk=ckpt.model_id).values_list("session_id", flat=True).first()
    )
    StoredObject.objects.create(
        tenant_id=ckpt.tenant_id,
        session_id=session_id or "",
        base_model=ckpt.base_model,
        checkpoint_id=ckpt.pk,
        size_bytes=stored_bytes(ckpt),
        stored_from=now,
    )


def checkpoint_gone(checkpoint_id: int, *, at: datetime | None = None) -> None:
    """The checkpoint's stored objects are gone (or replaced): its open span ends."""
    StoredObject.objects.filter(checkpoint_id=checkpoint_id, stored_until=None).update(
        stored_until=at or _clock()
    )


def hour_floor(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def storage_meter(*, now: datetime | None = None) -> int:
    """Bill the storage of every closed hour since the last run (at most ``MAX_HOURS``), in one
    transaction with the cursor; the usage rows written."""
    until = hour_floor(now or timezone.now())
    with transaction.atomic():
        cursor, _ = MeterCursor.objects.select_for_update().get_or_create(
            name=CURSOR, defaults={"through": until}
        )
        start = cursor.through
        end = min(until, start + MAX_HOURS * _HOUR)
        if start >= end:
            return 0
        spans = StoredObject.objects.filter(stored_from__lt=end).filter(
            Q(stored_until=None) | Q(stored_until__gt=start)
        )
        hourly = _byte_seconds(spans, start, end)
        rows = _bill(hourly)
        cursor.through = end
        cursor.save(update_fields=["through"])
        return len(usage_rows_write(rows))


Group = tuple[object, str, str]  # tenant id, session id, base model


def _byte_seconds(spans, start: datetime, end: datetime) -> dict[datetime, dict[Group, int]]:
    """Byte-seconds per hour of ``[start, end)`` and group, from the spans overlapping it."""
    hourly: dict[datetime, dict[Group, int]] = defaultdict(lambda: defaultdict(int))
    for span in spans.iterator(chunk_size=2000):
        lo = max(span.stored_from, start)
        hi = min(span.stored_until or end, end)
        hour = hour_floor(lo)
        while hour < hi:
            overlap = min(hi, hour + _HOUR) - max(lo, hour)
            micros = overlap // timedelta(microseconds=1)
            if micros > 0 and span.size_bytes > 0:
                group = (span.tenant_id, span.session_id, span.base_model)
                hourly[hour][group] += span.size_bytes * micros
            hour += _HOUR
    return hourly  # byte-microseconds, exact


def _bill(hourly: dict[datetime, dict[Group, int]]) -> list[UsageRecord]:
    """Add each hour to its group's total and bill the whole units it grew past."""
    groups = {g for per_hour in hourly.values() for g in per_hour}
    accruals = {
        (a.tenant_id, a.session_id, a.base_model): a
        for a in StorageAccrual.objects.select_for_update().filter(
            tenant_id__in={g[0] for g in groups}
        )
    }
    rows = []
    for hour in sorted(hourly):
        for group, byte_micros in sorted(hourly[hour].items(), key=str):
            accrual = accruals.get(group)
            if accrual is None:
                accrual = StorageAccrual(
                    tenant_id=group[0], session_id=group[1], base_model=group[2]
                )
                accruals[group] = accrual
            total = int(accrual.byte_microseconds) + byte_micros
            accrual.byte_microseconds = Decimal(total)
            units = total // UNIT
            if units > accrual.units:
                rows.append(_usage(group, hour, units - accrual.units))
                accrual.units = units
    for group in groups:
        accruals[group].save()
    return rows


def _usage(group: Group, hour: datetime, quantity: int) -> UsageRecord:
    tenant_id, session_id, base_model = group
    return UsageRecord(
        tenant_id=tenant_id,
        session_id=session_id or None,
        base_model=base_model,
        meter=Meter.STORAGE_GB_MONTHS,
        quantity=quantity,
        occurred_at=hour,
    )
