"""The daily usage rollup: reports through it equal the sums over usage rows for random usage,
ranges and price changes (mid-day and at midnight); it is built from existing rows by its
migration and stays exact under parallel writers."""

from __future__ import annotations

import importlib
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.db import connection, connections, transaction
from django.db.models import Sum

from controlplane.metering import reports
from controlplane.metering.models import Meter, UsageDaily, UsageRecord
from controlplane.metering.pricing import ZERO, PriceBook
from controlplane.metering.rollup import daily_rebuild, usage_rows_write
from controlplane.metering.selectors import price_points
from controlplane.metering.services import price_set

pytestmark = pytest.mark.django_db

FIRST = date(2026, 11, 25)
DAYS = 12
BASES = ("loopwright/tiny-byte-llama", "other/model")
SESSIONS = ("sess-a", "sess-b", None)
KEYS = ("tml-aaaaaaaaaaaa", "LWAKAAAAAAAAAAAAAAAA", "")


def _at(rng: random.Random) -> datetime:
    start = datetime(FIRST.year, FIRST.month, FIRST.day, tzinfo=UTC)
    if rng.random() < 0.1:  # exactly at a midnight
        return start + timedelta(days=rng.randrange(DAYS))
    return start + timedelta(seconds=rng.randrange(DAYS * 86400))


def _fill(rng: random.Random, tenants: list) -> list[UsageRecord]:
    rows = []
    for i in range(300):
        rows.append(
            UsageRecord(
                tenant=rng.choice(tenants),
                session_id=rng.choice(SESSIONS),
                api_key=KEYS[(i // 2) % len(KEYS)],  # one operation's rows share their key
                operation_id=f"req-{i // 2}" if rng.random() < 0.8 else None,
                base_model=rng.choice(BASES),
                meter=rng.choice(Meter.values),
                quantity=rng.randrange(1, 5_000_000),
                occurred_at=_at(rng),
            )
        )
    written: list[UsageRecord] = []
    for i in range(0, len(rows), 7):  # in small batches, as completions write them
        written += usage_rows_write(rows[i : i + 7])
    return written


def _prices(rng: random.Random) -> None:
    start = datetime(FIRST.year, FIRST.month, FIRST.day, tzinfo=UTC)
    for _ in range(4):
        day = start + timedelta(days=rng.randrange(1, DAYS))
        when = day if rng.random() < 0.4 else day + timedelta(seconds=rng.randrange(1, 86400))
        price_set(
            base_model=rng.choice(("*", *BASES)),
            meter=rng.choice(Meter.values),
            per_million=Decimal(rng.randrange(0, 2_000_000)) / 1_000_000,
            effective_from=when,
        )


def _expected(rows, *, tenant, start, end, group_by, meters, session_id, api_key=None) -> dict:
    """Every row priced on its own at the price in force when it occurred; a line's quantity
    counts tokens, and storage too on a line of its meter."""
    book = PriceBook.of(price_points())
    lo = datetime(start.year, start.month, start.day, tzinfo=UTC)
    hi = datetime(end.year, end.month, end.day, tzinfo=UTC) + timedelta(days=1)
    out: dict[tuple, list] = {}
    for r in rows:
        if r.tenant_id != tenant.pk or not lo <= r.occurred_at < hi:
            continue
        if (meters and r.meter not in meters) or (session_id and r.session_id != session_id):
            continue
        if api_key is not None and r.api_key != api_key:
            continue
        values = {
            "day": r.occurred_at.astimezone(UTC).date().isoformat(),
            "hour": r.occurred_at.astimezone(UTC).strftime("%Y-%m-%dT%H:00:00Z"),
            "session": r.session_id or "",
            "api_key": r.api_key,
            "base_model": r.base_model,
            "meter": r.meter,
        }
        key = tuple((k, values[k]) for k in group_by)
        acc = out.setdefault(key, [0, ZERO])
        counted = r.meter != "storage_gb_months" or "meter" in group_by
        acc[0] += r.quantity if counted else 0
        acc[1] += book.cost(r.base_model, r.meter, r.occurred_at, r.quantity)
    return {k: (q, c) for k, (q, c) in out.items()}


@pytest.mark.parametrize("seed", range(6))
def test_reports_through_the_rollup_equal_the_row_sums(alice, charlie, seed) -> None:
    rng = random.Random(seed)
    tenants = [alice.tenant, charlie.tenant]
    rows = _fill(rng, tenants)
    _prices(rng)
    for _ in range(15):
        start = FIRST + timedelta(days=rng.randrange(-1, DAYS))
        end = start + timedelta(days=rng.randrange(0, DAYS))
        query = {
            "tenant": rng.choice(tenants),
            "start": start,
            "end": end,
            "group_by": tuple(k for k in reports.GROUP_KEYS if rng.random() < 0.5),
            "meters": tuple(m for m in Meter.values if rng.random() < 0.3),
            "session_id": rng.choice((None, None, "sess-a")),
            "api_key": rng.choice((None, None, *KEYS)),
        }
        report = reports.usage_report(**query)
        got = {line.key: (line.quantity, line.cost) for line in report.lines}
        assert got == _expected(rows, **query), query


@pytest.mark.parametrize("seed", range(3))
def test_pieces_that_start_and_end_mid_day_cover_exactly_their_rows(alice, seed) -> None:
    rng = random.Random(100 + seed)
    rows = _fill(rng, [alice.tenant])
    scope = {"tenant": alice.tenant, "meters": (), "session_id": None}
    for _ in range(20):
        a, b = sorted((_at(rng), _at(rng)))
        trunc = rng.choice((None, "day", "hour"))
        sums = reports._piece_sums(a, b, scope=scope, trunc=trunc)
        got = sum(qs.aggregate(q=Sum("quantity"))["q"] or 0 for qs in sums)
        assert got == sum(r.quantity for r in rows if a <= r.occurred_at < b), (a, b)


def test_a_price_change_mid_day_splits_that_day(alice) -> None:
    noon = datetime(2026, 12, 15, 12, tzinfo=UTC)
    for i, (at, qty) in enumerate([(noon - timedelta(hours=1), 1_000_000), (noon, 2_000_000)]):
        row = UsageRecord(
            tenant=alice.tenant,
            session_id="sess-a",
            operation_id=f"req-{i}",
            base_model=BASES[0],
            meter="train_tokens",
            quantity=qty,
            occurred_at=at,
        )
        usage_rows_write([row])
    price_set(
        base_model="*", meter="train_tokens", per_million=Decimal("0.45"), effective_from=noon
    )
    report = reports.usage_report(
        tenant=alice.tenant, start=date(2026, 12, 1), end=date(2026, 12, 31), group_by=("day",)
    )
    assert [ln.as_json() for ln in report.lines] == [
        {"day": "2026-12-15", "quantity": 3_000_000, "cost": "1.200000"}  # 0.30 + 2 × 0.45
    ]


def test_writing_a_row_again_adds_nothing_to_its_day(alice) -> None:
    row = dict(
        tenant=alice.tenant,
        session_id="sess-a",
        operation_id="req-1",
        base_model=BASES[0],
        meter="train_tokens",
        quantity=7,
        occurred_at=datetime(2026, 12, 1, 23, 59, tzinfo=UTC),
    )
    assert len(usage_rows_write([UsageRecord(**row)])) == 1
    assert usage_rows_write([UsageRecord(**row)]) == []
    day = UsageDaily.objects.get()
    assert (day.day, day.session_id, day.quantity) == (date(2026, 12, 1), "sess-a", 7)


def test_the_migration_builds_the_rollup_from_existing_rows(alice, charlie) -> None:
    rows = _fill(random.Random(7), [alice.tenant, charlie.tenant])
    kept = _daily()
    assert sum(kept.values()) == sum(r.quantity for r in rows)
    UsageDaily.objects.all().delete()
    # the rollup's first migration summed rows recorded before keys were (all "")
    backfill = importlib.import_module("controlplane.metering.migrations.0004_usage_daily_backfill")
    backfill.build(apps, None)
    assert _daily(keys=False) == _without_keys(kept)
    assert daily_rebuild(tenant_id=alice.tenant.pk) > 0
    assert daily_rebuild(tenant_id=charlie.tenant.pk) > 0
    assert _daily() == kept


def _daily(*, keys: bool = True) -> dict[tuple, int]:
    return {
        (d.tenant_id, d.day, d.session_id, d.api_key if keys else "", d.base_model, d.meter): (
            d.quantity
        )
        for d in UsageDaily.objects.all()
    }


def _without_keys(daily: dict[tuple, int]) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for (tenant, day, session, _, base, meter), quantity in daily.items():
        key = (tenant, day, session, "", base, meter)
        out[key] = out.get(key, 0) + quantity
    return out


@pytest.mark.django_db(transaction=True)
def test_parallel_completions_add_up_exactly(alice) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("parallel writers need PostgreSQL")
    when = datetime(2026, 12, 3, 10, tzinfo=UTC)
    start = threading.Barrier(8)

    def complete(worker: int) -> int:
        try:
            start.wait()
            written = 0
            for i in range(25):
                op = f"req-{i % 20}-{worker % 4}"  # every operation completed twice, in parallel
                rows = [
                    UsageRecord(
                        tenant=alice.tenant,
                        session_id="sess-a",
                        operation_id=op,
                        base_model=BASES[0],
                        meter=meter,
                        quantity=qty,
                        occurred_at=when + timedelta(seconds=i),
                    )
                    for meter, qty in (("prefill_tokens", 11), ("sampled_tokens", 5))
                ]
                with transaction.atomic():
                    written += len(usage_rows_write(rows))
            return written
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=8) as pool:
        written = sum(pool.map(complete, range(8)))
    assert written == UsageRecord.objects.count() == 2 * 20 * 4
    totals = dict(UsageDaily.objects.values_list("meter", "quantity"))
    assert totals == {"prefill_tokens": 11 * 80, "sampled_tokens": 5 * 80}
