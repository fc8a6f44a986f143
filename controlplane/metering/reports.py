"""Usage and cost reports: token quantities grouped by day, session, base model and meter, each
priced at the price in force when the tokens were processed."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from itertools import pairwise

from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDate, TruncHour

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant

from . import selectors
from .models import TOKEN_METERS, Meter
from .pricing import ZERO, PriceBook

GROUP_KEYS = ("day", "hour", "session", "api_key", "base_model", "meter")
MAX_RANGE_DAYS = 366
MAX_HOURLY_DAYS = 31  # a report by the hour reads the usage rows themselves: a month at most
CURRENCY = "usd"
COST_PLACES = Decimal("0.000001")
CENT = Decimal("0.01")

_DAY = timedelta(days=1)
_COLUMN = {
    "day": "day",
    "hour": "hour",
    "session": "session_id",
    "api_key": "api_key",
    "base_model": "base_model",
    "meter": "meter",
}


@dataclass(frozen=True)
class Line:
    """One group of a report: its key values (by group key), tokens and cost. ``quantity`` is
    its tokens; a line of the storage meter (grouped by meter) counts millionths of a GB-month
    there instead, and ``tokens`` is 0. Storage's cost is in every line's cost."""

    key: tuple[tuple[str, str], ...]
    quantity: int
    cost: Decimal
    tokens: int = 0

    def as_json(self) -> dict:
        return {**dict(self.key), "quantity": self.quantity, "cost": money(self.cost)}


@dataclass(frozen=True)
class Report:
    start: date
    end: date  # inclusive
    group_by: tuple[str, ...]
    lines: list[Line]

    @property
    def quantity(self) -> int:
        """Tokens (storage is in the cost, not counted here)."""
        return sum(line.tokens for line in self.lines)

    @property
    def cost(self) -> Decimal:
        return sum((line.cost for line in self.lines), ZERO)

    def as_json(self) -> dict:
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "group_by": list(self.group_by),
            "currency": CURRENCY,
            "lines": [line.as_json() for line in self.lines],
            "total": {"quantity": self.quantity, "cost": money(self.cost)},
        }

    def as_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*self.group_by, "quantity", "cost", "currency"])
        for line in self.lines:
            values = dict(line.key)
            row = [values[k] for k in self.group_by]
            writer.writerow([*row, line.quantity, money(line.cost), CURRENCY])
        return out.getvalue()


def money(amount: Decimal) -> str:
    return str(amount.quantize(COST_PLACES, rounding=ROUND_HALF_UP))


def parse_group_by(raw: str | None) -> tuple[str, ...]:
    """``day,meter`` → ('day', 'meter'); an unknown key is a 400 naming the field."""
    if not raw:
        return ()
    keys = tuple(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    for key in keys:
        if key not in GROUP_KEYS:
            raise DomainError(
                f"group_by: unknown key {key!r} (any of {', '.join(GROUP_KEYS)})", field="group_by"
            )
    return keys


def hourly_range_check(group_by: Sequence[str], start: date, end: date) -> None:
    """A report by the hour covers at most ``MAX_HOURLY_DAYS`` days (a 400 naming ``end``)."""
    if "hour" in group_by and (end - start).days + 1 > MAX_HOURLY_DAYS:
        raise DomainError(
            f"end: grouped by hour, a range of at most {MAX_HOURLY_DAYS} days", field="end"
        )


def parse_meters(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    meters = tuple(dict.fromkeys(m.strip() for m in raw.split(",") if m.strip()))
    for meter in meters:
        if meter not in Meter.values:
            raise DomainError(
                f"meter: unknown meter {meter!r} (any of {', '.join(Meter.values)})", field="meter"
            )
    return meters


def parse_range(start: str | None, end: str | None, *, today: date) -> tuple[date, date]:
    """ISO dates, both inclusive; by default the current month up to ``today``."""
    first = _date(start, "start") if start else today.replace(day=1)
    last = _date(end, "end") if end else today
    if last < first:
        raise DomainError("end: must not be before start", field="end")
    if (last - first).days + 1 > MAX_RANGE_DAYS:
        raise DomainError(f"end: a range of at most {MAX_RANGE_DAYS} days", field="end")
    return first, last


def _date(raw: str, name: str) -> date:
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise DomainError(f"{name}: an ISO date (YYYY-MM-DD)", field=name) from None


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def usage_report(
    *,
    tenant: Tenant,
    start: date,
    end: date,
    group_by: Sequence[str] = (),
    meters: Sequence[str] = (),
    session_id: str | None = None,
    api_key: str | None = None,
    session_in: object | None = None,
    book: PriceBook | None = None,
    until: datetime | None = None,
) -> Report:
    """Tokens and cost from ``start`` to ``end`` (whole UTC days; up to ``until`` within them
    when given), grouped by ``group_by``; only ``meters``, session ``session_id``, key
    ``api_key`` or the sessions ``session_in`` (ids, or a query of them) when given.

    The range is cut wherever a price changes, so each piece has one price per base model and
    meter. A piece's whole UTC days are summed from the daily totals, the hours before its first
    and after its last midnight from the usage rows (all of it from the rows, by the hour, when
    grouped by hour); both are summed by the database per group, base model and meter.
    """
    book = book or PriceBook.of(selectors.price_points(currency=CURRENCY))
    lo, hi = _midnight(start), _midnight(end + timedelta(days=1))
    if until is not None:
        hi = max(lo, min(hi, until))
    cuts = [lo, *book.changes_within(lo, hi), hi]
    columns = list(dict.fromkeys([_COLUMN[k] for k in group_by] + ["base_model", "meter"]))
    scope = {
        "tenant": tenant,
        "meters": meters,
        "session_id": session_id,
        "api_key": api_key,
        "session_in": session_in,
    }
    trunc = "hour" if "hour" in group_by else "day" if "day" in group_by else None
    totals: dict[tuple, list] = {}
    for a, b in pairwise(cuts):
        for qs in _piece_sums(a, b, scope=scope, trunc=trunc):
            for row in qs.values(*columns).annotate(q=Sum("quantity")).order_by():
                key = tuple((k, _text(row[_COLUMN[k]])) for k in group_by)
                cost = book.cost(row["base_model"], row["meter"], a, row["q"])
                acc = totals.setdefault(key, [0, ZERO, 0])
                is_tokens = row["meter"] in TOKEN_METERS
                acc[0] += row["q"] if is_tokens or "meter" in group_by else 0
                acc[1] += cost
                acc[2] += row["q"] if is_tokens else 0
    lines = [Line(key, q, cost, tokens) for key, (q, cost, tokens) in sorted(totals.items())]
    return Report(start, end, tuple(group_by), lines)


def _piece_sums(a: datetime, b: datetime, *, scope: dict, trunc: str | None) -> list[QuerySet]:
    """Querysets covering ``[a, b)`` exactly: daily totals for its whole UTC days, usage rows for
    the partial days at either end (only usage rows, by the hour, when ``trunc`` is hour)."""
    a, b = a.astimezone(UTC), b.astimezone(UTC)
    first = _midnight(a.date()) if a == _midnight(a.date()) else _midnight(a.date() + _DAY)
    last = _midnight(b.date())
    if trunc == "hour":
        rows = selectors.usage_rows(start=a, end=b, **scope).annotate(
            hour=TruncHour("occurred_at", tzinfo=UTC), day=TruncDate("occurred_at", tzinfo=UTC)
        )
        return [rows] if a < b else []
    if first >= last:  # no whole day inside
        spans = [(a, b)]
        days = None
    else:
        spans = [(x, y) for x, y in ((a, first), (last, b)) if x < y]
        days = selectors.usage_days(first=first.date(), stop=last.date(), **scope)
    out: list[QuerySet] = [] if days is None else [days]
    for x, y in spans:
        qs = selectors.usage_rows(start=x, end=y, **scope)
        by_day = trunc == "day"
        out.append(qs.annotate(day=TruncDate("occurred_at", tzinfo=UTC)) if by_day else qs)
    return out


def _text(value: object) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    return "" if value is None else str(value)


def invoice_preview(*, tenant: Tenant, today: date) -> dict:
    """The calendar month of ``today`` so far: one line per base model and meter, with totals."""
    first = today.replace(day=1)
    report = usage_report(tenant=tenant, start=first, end=today, group_by=("base_model", "meter"))
    return {
        "period_start": first.isoformat(),
        "period_end": today.isoformat(),
        "currency": CURRENCY,
        "lines": [line.as_json() for line in report.lines],
        "total_quantity": report.quantity,
        "subtotal": money(report.cost),
        "amount_due": str(report.cost.quantize(CENT, rounding=ROUND_HALF_UP)),
    }


def session_usage(*, tenant: Tenant, session_id: str) -> dict:
    """Everything a session has used, by base model and meter, priced when it was used."""
    rows = selectors.session_usage_rows(tenant=tenant, session_id=session_id)
    span = rows.order_by().values_list("occurred_at", flat=True)
    first, last = span.order_by("occurred_at").first(), span.order_by("-occurred_at").first()
    lines: list[dict] = []
    total = ZERO
    quantity = 0
    if first is not None and last is not None:
        report = usage_report(
            tenant=tenant,
            start=first.astimezone(UTC).date(),
            end=last.astimezone(UTC).date(),
            group_by=("base_model", "meter"),
            session_id=session_id,
        )
        lines, total, quantity = [ln.as_json() for ln in report.lines], report.cost, report.quantity
    return {
        "session_id": session_id,
        "currency": CURRENCY,
        "lines": lines,
        "total_quantity": quantity,
        "total_cost": money(total),
    }
