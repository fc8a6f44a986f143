"""A budget's periods in UTC: a day, a week from Monday, a calendar month, or all time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

BEGINNING = datetime(2000, 1, 1, tzinfo=UTC)  # before any usage: where "total" starts


@dataclass(frozen=True)
class Span:
    """``[start, end)``; ``end`` is None for a period that never ends."""

    period: str
    start: datetime
    end: datetime | None

    @property
    def first_day(self) -> date:
        return self.start.date()

    def last_day(self, now: datetime) -> date:
        """The last UTC day of the span that has begun by ``now`` (reports include it)."""
        if self.end is None:
            return now.astimezone(UTC).date()
        return (self.end - timedelta(days=1)).date()

    def label(self) -> str:
        """How a message names it: 2026-12-10, the week of 2026-12-07, 2026-12, in total."""
        if self.period == "day":
            return f"on {self.start:%Y-%m-%d}"
        if self.period == "week":
            return f"in the week of {self.start:%Y-%m-%d}"
        if self.period == "month":
            return f"in {self.start:%Y-%m}"
        return "in total"


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def span_of(period: str, now: datetime) -> Span:
    """The period of kind ``period`` that ``now`` falls in."""
    today = now.astimezone(UTC).date()
    if period == "day":
        return Span(period, _midnight(today), _midnight(today + timedelta(days=1)))
    if period == "week":
        monday = today - timedelta(days=today.weekday())
        return Span(period, _midnight(monday), _midnight(monday + timedelta(days=7)))
    if period == "month":
        first = today.replace(day=1)
        return Span(period, _midnight(first), _midnight(next_month(first)))
    return Span(period, BEGINNING, None)
