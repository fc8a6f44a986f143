"""The daily usage rollup: usage rows and their day's totals written in one transaction, and a
rebuild of the totals from the rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date

from django.db import connection, transaction
from django.db.models import Sum
from django.db.models.functions import TruncDate

from .models import UsageDaily, UsageRecord

_USAGE_COLUMNS = (
    "tenant",
    "session",
    "model",
    "sampler",
    "operation",
    "api_key",
    "base_model",
    "meter",
    "quantity",
    "occurred_at",
)
DayKey = tuple[object, date, str, str, str, str]  # tenant, day, session, key, base model, meter


def usage_rows_write(rows: Sequence[UsageRecord]) -> list[UsageRecord]:
    """Insert usage rows, skipping any whose (operation, meter) exists, and add the inserted
    ones to their days' totals; the rows actually inserted."""
    if not rows:
        return []
    with transaction.atomic():
        inserted = _insert_new(rows)
        daily_add(inserted)
    return inserted


def usage_write_ctes(rows: Sequence[UsageRecord], *, gate: str) -> tuple[str, list]:
    """What ``usage_rows_write`` does, as common table expressions for one PostgreSQL statement:
    the rows are inserted (skipping any whose (operation, meter) exists) only if the expression
    named ``gate`` returned a row, and those inserted are added to their days' totals.

    For writing an operation's completion and its usage in one statement; the rows must share
    their tenant, session, key, base model and time (one operation's rows do). Returns the SQL of the
    expressions (empty when there are no rows) and its parameters.
    """
    if not rows:
        return "", []
    first = rows[0]
    shared = [f for f in _USAGE_COLUMNS if f not in ("meter", "quantity")]
    assert all(day_key(r)[:5] == day_key(first)[:5] for r in rows), "one operation's rows"  # noqa: S101 — an invariant of this code, not a check of input
    quote = connection.ops.quote_name
    usage, daily = quote(UsageRecord._meta.db_table), quote(UsageDaily._meta.db_table)
    fields = {name: UsageRecord._meta.get_field(name) for name in _USAGE_COLUMNS}
    params = [
        fields[n].get_db_prep_save(getattr(first, fields[n].attname), connection) for n in shared
    ]
    meters = sorted({r.meter: r.quantity for r in rows}.items())  # one row per meter
    for meter, quantity in meters:
        params += [meter, quantity]
    columns = ", ".join(quote(fields[n].column) for n in (*shared, "meter", "quantity"))
    values = ", ".join(["(%s, %s::bigint)"] * len(meters))
    # totals keys in a fixed order (meter, byte-wise), as daily_add, so writers never deadlock
    sql = f"""
        usage_new AS (
            INSERT INTO {usage} ({columns})
            SELECT {", ".join(["%s"] * len(shared))}, v.meter, v.quantity
            FROM (VALUES {values}) AS v(meter, quantity)
            WHERE EXISTS (SELECT 1 FROM {gate})
            ON CONFLICT (operation_id, meter) DO NOTHING
            RETURNING meter, quantity
        ), usage_days AS (
            INSERT INTO {daily} (tenant_id, day, session_id, api_key, base_model, meter, quantity)
            SELECT %s, %s, %s, %s, %s, meter, sum(quantity) FROM usage_new
            GROUP BY meter ORDER BY meter COLLATE "C"
            ON CONFLICT (tenant_id, day, session_id, api_key, base_model, meter)
            DO UPDATE SET quantity = {daily}.quantity + excluded.quantity
        )"""  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
    tenant, day, session, key, base_model, _ = day_key(first)
    day_fields = [
        UsageDaily._meta.get_field(n)
        for n in ("tenant", "day", "session_id", "api_key", "base_model")
    ]
    params += [
        f.get_db_prep_save(v, connection)
        for f, v in zip(day_fields, (tenant, day, session, key, base_model), strict=True)
    ]
    return sql, params


def _insert_new(rows: Sequence[UsageRecord]) -> list[UsageRecord]:
    seen: set[tuple] = set()
    unique = []
    for r in rows:  # one statement may not write one (operation, meter) twice
        if r.operation_id is None or (r.operation_id, r.meter) not in seen:
            seen.add((r.operation_id, r.meter))
            unique.append(r)
    rows = unique
    fields = [UsageRecord._meta.get_field(name) for name in _USAGE_COLUMNS]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    values = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * len(rows))
    params = [f.get_db_prep_save(getattr(r, f.attname), connection) for r in rows for f in fields]
    sql = (
        f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({columns}) VALUES {values} "  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
        "ON CONFLICT (operation_id, meter) DO NOTHING RETURNING operation_id, meter"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        written = set(cursor.fetchall())
    # a row without an operation never conflicts; one with an operation is new when returned
    return [r for r in rows if r.operation_id is None or (r.operation_id, r.meter) in written]


def day_key(row: UsageRecord) -> DayKey:
    return (
        row.tenant_id,
        row.occurred_at.astimezone(UTC).date(),
        row.session_id or "",
        row.api_key or "",
        row.base_model,
        row.meter,
    )


def daily_add(rows: Sequence[UsageRecord]) -> None:
    """Add rows to their days' totals with one upsert, exact under concurrent writers (keys go in
    a fixed order, so two writers never wait on each other in a cycle)."""
    totals: dict[DayKey, int] = {}
    for row in rows:
        totals[day_key(row)] = totals.get(day_key(row), 0) + row.quantity
    if not totals:
        return
    meta = UsageDaily._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    names = ("tenant", "day", "session_id", "api_key", "base_model", "meter", "quantity")
    fields = [meta.get_field(n) for n in names]
    params: list = []
    for key in sorted(totals, key=lambda k: tuple(str(part) for part in k)):
        for field, value in zip(fields, (*key, totals[key]), strict=True):
            params.append(field.get_db_prep_save(value, connection))
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    unique = ", ".join(quote(f.column) for f in fields[:-1])
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(quote(f.column) for f in fields)}) "  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
            f"VALUES {', '.join([one] * len(totals))} "
            f"ON CONFLICT ({unique}) DO UPDATE SET quantity = {table}.quantity + excluded.quantity",
            params,
        )


@transaction.atomic
def daily_rebuild(*, tenant_id: object | None = None) -> int:
    """Recompute the days' totals from the usage rows (one tenant, or all); the rows written.

    For rows loaded around the writer (a bulk import): normal writes keep the totals as they go.
    """
    days = UsageDaily.objects.all()
    usage = UsageRecord.objects.all()
    if tenant_id is not None:
        days, usage = days.filter(tenant_id=tenant_id), usage.filter(tenant_id=tenant_id)
    days.delete()
    groups = (
        usage.annotate(day=TruncDate("occurred_at", tzinfo=UTC))
        .values("tenant_id", "day", "session_id", "api_key", "base_model", "meter")
        .annotate(q=Sum("quantity"))
        .order_by()
    )
    built = [
        UsageDaily(
            tenant_id=g["tenant_id"],
            day=g["day"],
            session_id=g["session_id"] or "",
            api_key=g["api_key"] or "",
            base_model=g["base_model"],
            meter=g["meter"],
            quantity=g["q"],
        )
        for g in groups.iterator(chunk_size=5000)
    ]
    UsageDaily.objects.bulk_create(built, batch_size=5000)
    return len(built)
