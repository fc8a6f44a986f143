"""Usage reports on PostgreSQL: a month of 1,000,000 usage rows of one tenant, grouped by day and
meter and priced, through ``metering.reports.usage_report`` (whole days from the daily rollup)
against the same aggregate as one raw SQL query over the usage rows. Runs in a throwaway database
that it creates and drops.

    python -m bench.usage_report_bench [--rows 1000000] [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/loopwright")
# a throwaway database's own secrets (production reads them from its environment too)
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(48))
os.environ.setdefault("LOOPWRIGHT_KMS_MASTER_KEY", secrets.token_urlsafe(48))

import django

django.setup()

from django.db import connection  # noqa: E402

from bench.report import Row, format_table, parse_with_quick  # noqa: E402
from controlplane.metering import reports  # noqa: E402
from controlplane.metering.rollup import daily_rebuild  # noqa: E402
from controlplane.metering.services import price_set  # noqa: E402
from controlplane.tenants.models import Tenant  # noqa: E402

MONTH = date(2026, 12, 1)
DAYS = 31
METERS = ("train_tokens", "forward_tokens", "prefill_tokens", "sampled_tokens")
BASE_MODELS = ("loopwright/tiny-byte-llama", "HuggingFaceTB/SmolLM2-135M-Instruct")

REFERENCE_SQL = """
SELECT (occurred_at AT TIME ZONE 'UTC')::date AS day, meter, base_model, SUM(quantity)
FROM metering_usagerecord
WHERE tenant_id = %s AND occurred_at >= %s AND occurred_at < %s
GROUP BY 1, 2, 3
"""


def fill(tenant: Tenant, rows: int, seed: int = 0) -> float:
    """COPY ``rows`` usage rows spread over the month; returns the seconds it took."""
    rng = random.Random(seed)
    start = datetime.combine(MONTH, datetime.min.time(), tzinfo=UTC)
    span = DAYS * 86400
    began = time.perf_counter()
    with connection.cursor() as cursor:
        raw = cursor.cursor
        columns = (
            "tenant_id, session_id, operation_id, api_key, base_model, meter, quantity, occurred_at"
        )
        with raw.copy(f"COPY metering_usagerecord ({columns}) FROM STDIN") as copy:
            for i in range(rows):
                meter = METERS[i % len(METERS)]
                copy.write_row(
                    (
                        tenant.id,
                        f"sess-{rng.randrange(200):04d}",
                        f"req-{i // len(METERS):012d}",
                        "",  # no key: as the model's default, which COPY does not apply
                        BASE_MODELS[rng.randrange(len(BASE_MODELS))],
                        meter,
                        rng.randrange(1, 4096),
                        start + timedelta(seconds=rng.randrange(span)),
                    )
                )
        cursor.execute("ANALYZE metering_usagerecord")
    return time.perf_counter() - began


def timed(call, reps: int) -> list[float]:
    call()  # warm-up
    out = []
    for _ in range(reps):
        began = time.perf_counter()
        call()
        out.append(time.perf_counter() - began)
    return out


def reference(tenant: Tenant) -> list:
    lo = datetime.combine(MONTH, datetime.min.time(), tzinfo=UTC)
    with connection.cursor() as cursor:
        cursor.execute(REFERENCE_SQL, [tenant.id, lo, lo + timedelta(days=DAYS)])
        return cursor.fetchall()


def ours(tenant: Tenant) -> reports.Report:
    return reports.usage_report(
        tenant=tenant,
        start=MONTH,
        end=MONTH + timedelta(days=DAYS - 1),
        group_by=("day", "meter"),
    )


def run(rows: int, reps: int) -> None:
    tenant = Tenant.objects.create(name="bench")
    loaded = fill(tenant, rows)
    began = time.perf_counter()
    days = daily_rebuild(tenant_id=tenant.pk)  # COPY goes around the writer that keeps it
    rolled = time.perf_counter() - began
    report = ours(tenant)
    expected: dict[tuple, int] = {}
    for day, meter, _, q in reference(tenant):
        key = (("day", day.isoformat()), ("meter", meter))
        expected[key] = expected.get(key, 0) + q
    assert {line.key: line.quantity for line in report.lines} == expected  # the same tokens
    table: list[Row] = []

    def row(metric: str) -> None:
        a, b = timed(lambda: ours(tenant), reps), timed(lambda: reference(tenant), reps)
        pa, pb = statistics.median(a), statistics.median(b)
        table.append(
            Row(
                metric,
                pa * 1000,
                pb * 1000,
                "<=",
                1.5,
                f"p50 of {reps}; ours {pa * 1000:.0f} ms (max {max(a) * 1000:.0f} ms), target "
                f"under 1000 ms; reference: the same sums as one raw SQL query",
            )
        )

    row("month by day+meter, one price (ms)")
    price_set(
        base_model="*",
        meter="train_tokens",
        per_million=Decimal("0.45"),
        effective_from=datetime(2026, 12, 15, 12, tzinfo=UTC),
    )
    row("month by day+meter, price change (ms)")
    print(f"\n{rows:,} usage rows of one tenant, loaded with COPY in {loaded:.1f} s")
    print(f"daily rollup built from them in {rolled:.1f} s: {days:,} rows")
    print(format_table(table))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=7)
    args = parse_with_quick(p, argv, {"rows": 2000, "reps": 1})
    if connection.vendor != "postgresql":
        raise SystemExit("set DATABASE_URL to a PostgreSQL server")
    creation = connection.creation
    old_name = connection.settings_dict["NAME"]
    creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        run(args.rows, args.reps)
    finally:
        creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
