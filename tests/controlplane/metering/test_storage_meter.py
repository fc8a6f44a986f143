"""The storage meter: checkpoints saved and deleted at known times are billed, hour by closed
hour and each hour once, exactly the GB-months an independent computation gets from the bytes
on disk and the times they were kept; the usage report prices them from the price book."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from django.db.models import Sum

from controlplane.metering import storage
from controlplane.metering.models import MeterCursor, UsageRecord
from controlplane.metering.reports import usage_report
from controlplane.training_sessions.models import Checkpoint
from controlplane.training_sessions.services.retention import weights_delete
from tests.support.wire import ModelRun, open_session

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)  # the meter's first hour


class Clock:
    def __init__(self, monkeypatch) -> None:
        self.now = T0
        monkeypatch.setattr(storage, "_clock", lambda: self.now)


def _disk_bytes(ckpt: Checkpoint) -> int:
    """What the checkpoint's folder holds on disk, counted here."""
    folder = Path(ckpt.storage_path)
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_gb_months_equal_an_independent_computation(alice, runtime, monkeypatch) -> None:
    clock = Clock(monkeypatch)
    assert storage.storage_meter(now=T0) == 0  # the cursor starts at T0
    sid = open_session(alice)
    run = ModelRun(alice, runtime, sid)
    clock.now = T0 + timedelta(minutes=17, seconds=3)
    a = Checkpoint.objects.get(tinker_path=run.run("save_weights", path="a")["path"])
    clock.now = T0 + timedelta(hours=2, minutes=40)
    b = Checkpoint.objects.get(tinker_path=run.run("save_weights_for_sampler", path="b")["path"])
    sizes = {a.pk: _disk_bytes(a), b.pk: _disk_bytes(b)}
    assert all(sizes.values())
    clock.now = T0 + timedelta(hours=3, minutes=5, seconds=30)  # b is gone within its hour
    b_id = b.pk
    assert weights_delete(b, action="sessions:DeleteCheckpoint", reason="test")
    kept = [(a.pk, T0 + timedelta(minutes=17, seconds=3), None)]
    kept.append((b_id, T0 + timedelta(hours=2, minutes=40), clock.now))

    end = T0 + timedelta(hours=30, minutes=59)  # 30 closed hours
    for hour in range(1, 31, 7):  # the meter runs now and then, a few hours at a time
        storage.storage_meter(now=T0 + timedelta(hours=hour, minutes=1))
    storage.storage_meter(now=end)
    storage.storage_meter(now=end)  # again: nothing more
    closed = T0 + timedelta(hours=30)

    gb_months = Fraction(0)
    for pk, since, until in kept:
        seconds = ((until or closed) - since).total_seconds()
        gb_months += Fraction(sizes[pk], 10**9) * Fraction(int(seconds), 720 * 3600)
    rows = UsageRecord.objects.filter(tenant=alice.tenant, meter="storage_gb_months")
    billed = rows.aggregate(q=Sum("quantity"))["q"]
    assert billed == int(gb_months * 1_000_000)  # whole millionths, never rounded hour by hour
    assert {r.session_id for r in rows} == {sid} and {r.api_key for r in rows} == {""}
    assert all(r.occurred_at.minute == 0 and T0 <= r.occurred_at < closed for r in rows)
    assert rows.filter(occurred_at__gte=T0 + timedelta(hours=4)).exists()  # a is still kept

    report = usage_report(
        tenant=alice.tenant, start=T0.date(), end=end.date(), meters=("storage_gb_months",)
    )
    assert report.cost == Decimal(billed) * Decimal("0.10") / 1_000_000  # $0.10 a GB-month
    assert report.quantity == 0  # storage is not tokens


def test_every_hour_is_billed_once_and_a_late_run_catches_up(alice, runtime, monkeypatch) -> None:
    clock = Clock(monkeypatch)
    storage.storage_meter(now=T0)
    run = ModelRun(alice, runtime, open_session(alice))
    clock.now = T0 + timedelta(minutes=1)
    ckpt = Checkpoint.objects.get(tinker_path=run.run("save_weights", path="a")["path"])
    done = T0 + timedelta(days=9, minutes=3)  # over a week later: two runs to catch up

    def billed() -> int:
        rows = UsageRecord.objects.filter(meter="storage_gb_months")
        return rows.aggregate(q=Sum("quantity"))["q"] or 0

    storage.storage_meter(now=done)
    cursor = MeterCursor.objects.get(name="storage")
    assert cursor.through == T0 + timedelta(hours=storage.MAX_HOURS)
    week = billed()
    storage.storage_meter(now=done)
    assert MeterCursor.objects.get(name="storage").through == T0 + timedelta(days=9)
    storage.storage_meter(now=done)  # nothing more: every closed hour is billed
    seconds = (T0 + timedelta(days=9) - clock.now).total_seconds()
    expected = Fraction(_disk_bytes(ckpt) * int(seconds), 10**9 * 720 * 3600)
    assert billed() == int(expected * 1_000_000)
    assert 0 < week < billed()


def test_tinkers_current_storage_is_what_is_kept_now(alice, charlie, runtime, monkeypatch) -> None:
    Clock(monkeypatch)
    run = ModelRun(alice, runtime, open_session(alice))
    ckpt = Checkpoint.objects.get(tinker_path=run.run("save_weights", path="a")["path"])
    now = alice.get("billing/usage/checkpoints/current").json()
    assert now["effective_rate_usd_per_gigabyte_month"] == 0.1
    (item,) = now["data"]
    assert (item["project_id"], item["checkpoint_count"]) == ("default", 1)
    assert item["size_bytes"] == _disk_bytes(ckpt)
    assert item["estimated_monthly_cost_usd"] == pytest.approx(_disk_bytes(ckpt) / 1e9 * 0.1)
    assert (
        alice.get("billing/usage/checkpoints/current", {"project_id": "other"}).json()["data"] == []
    )
    assert charlie.get("billing/usage/checkpoints/current").json()["data"][0]["size_bytes"] == 0
