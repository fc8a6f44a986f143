"""Prices before spending: the price book as it stands now (per meter, for each served base model
and for any other), the changes already scheduled, and what a training run would cost, from the
same price book the bill uses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from controlplane.metering.models import ANY_BASE_MODEL, Meter
from controlplane.metering.pricing import MILLION, PriceBook
from controlplane.metering.selectors import price_points

from .values import NOTHING, meter_name, tokens, usd

# the example run the new-session form prices: steps × sequences × tokens per sequence
EXAMPLE = {"steps": 1000, "sequences": 8, "tokens": 512}


@dataclass
class PriceRow:
    base_model: str  # "*": any base model without a price of its own
    meter: str
    per_million: Decimal | None

    @property
    def meter_label(self) -> str:
        return meter_name(self.meter)

    @property
    def per_million_text(self) -> str:
        if self.per_million is None:
            return "free"
        if self.meter == Meter.STORAGE_GB_MONTHS:  # a million of its units is a GB-month
            return f"{usd(self.per_million)} per GB-month"
        return usd(self.per_million)

    @property
    def per_thousand_text(self) -> str:
        if self.meter == Meter.STORAGE_GB_MONTHS:
            return NOTHING
        return usd(self.per_million / 1000) if self.per_million is not None else "free"


def price_book() -> PriceBook:
    return PriceBook.of(price_points())


def price_rows(*, base_models: list[str], now: datetime, book: PriceBook | None = None):
    """The prices in force at ``now``: one row per meter for ``*`` and for each base model that
    has a price of its own."""
    book = book or price_book()
    own = {model for model, _ in book.points if model != ANY_BASE_MODEL}
    rows = []
    for model in [ANY_BASE_MODEL, *sorted(set(base_models) & own)]:
        for meter in Meter.values:
            rows.append(PriceRow(model, meter, book.per_million(model, meter, now)))
    return rows


def scheduled(*, now: datetime, book: PriceBook | None = None) -> list[dict]:
    """Price changes that take effect after ``now``, soonest first."""
    book = book or price_book()
    return sorted(
        (
            {
                "base_model": model,
                "meter": meter_name(meter),
                "from": when,
                "per_million": usd(price),
            }
            for (model, meter), series in book.points.items()
            for when, price in series
            if when > now
        ),
        key=lambda c: c["from"],
    )


def training_estimate(*, base_model: str, now: datetime, book: PriceBook | None = None) -> dict:
    """What the example run costs in training tokens on ``base_model`` now; and the price per
    million of each meter, for the form's own arithmetic."""
    book = book or price_book()
    per_million = {m: book.per_million(base_model, m, now) or Decimal(0) for m in Meter.values}
    count = EXAMPLE["steps"] * EXAMPLE["sequences"] * EXAMPLE["tokens"]
    cost = per_million[Meter.TRAIN_TOKENS] * count / MILLION
    return {
        **EXAMPLE,
        "train_tokens": tokens(count),
        "cost": usd(cost),
        "prices": {m: str(p) for m, p in per_million.items()},
        "train_per_million": usd(per_million[Meter.TRAIN_TOKENS]),
        "sampled_per_million": usd(per_million[Meter.SAMPLED_TOKENS]),
    }
