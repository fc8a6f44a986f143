"""The price in force for a base model and meter at a moment (a model's own price beats ``*``)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from .models import ANY_BASE_MODEL, PricePoint

MILLION = Decimal(1_000_000)
ZERO = Decimal(0)


@dataclass
class PriceBook:
    """Price points by (base model, meter), each list sorted by ``effective_from``."""

    points: dict[tuple[str, str], list[tuple[datetime, Decimal]]] = field(default_factory=dict)

    @classmethod
    def of(cls, points: Iterable[PricePoint]) -> PriceBook:
        book = cls()
        for p in sorted(points, key=lambda p: p.effective_from):
            book.points.setdefault((p.base_model, p.meter), []).append(
                (p.effective_from, p.per_million)
            )
        return book

    def per_million(self, base_model: str, meter: str, at: datetime) -> Decimal | None:
        """The price per million tokens in force at ``at``; None when no price applies."""
        for key in ((base_model, meter), (ANY_BASE_MODEL, meter)):
            series = self.points.get(key)
            if not series:
                continue
            i = bisect_right([when for when, _ in series], at)
            if i:
                return series[i - 1][1]
        return None

    def cost(self, base_model: str, meter: str, at: datetime, quantity: int) -> Decimal:
        price = self.per_million(base_model, meter, at)
        return ZERO if price is None else price * quantity / MILLION

    def changes_within(self, start: datetime, end: datetime) -> list[datetime]:
        """The moments in (start, end) at which some price changes, in order."""
        return sorted(
            {when for series in self.points.values() for when, _ in series if start < when < end}
        )
