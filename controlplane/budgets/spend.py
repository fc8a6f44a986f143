"""What a budget has spent in a period (its scope's metered usage, in tokens or priced from
the price book) and what its admitted, unfinished operations still hold."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum

from controlplane.metering import reports, selectors
from controlplane.metering.models import TOKEN_METERS
from controlplane.metering.pricing import ZERO
from controlplane.training_sessions.models import Operation

from .models import Budget, BudgetHold
from .periods import Span, span_of
from .scopes import usage_filters

UNFINISHED = (Operation.Status.PENDING, Operation.Status.RUNNING)


def spent(budget: Budget, span: Span, *, now: datetime) -> Decimal:
    """The budget's usage in ``span`` (up to ``now``): tokens of every token meter, or the cost
    of every meter in US dollars, priced as the usage report prices it."""
    filters = usage_filters(budget)
    if budget.unit == Budget.Unit.TOKENS:
        stop = span.last_day(now) + timedelta(days=1)
        days = selectors.usage_days(
            tenant=budget.tenant, first=span.first_day, stop=stop, meters=TOKEN_METERS, **filters
        )
        return Decimal(days.aggregate(q=Sum("quantity"))["q"] or 0)
    report = reports.usage_report(
        tenant=budget.tenant, start=span.first_day, end=span.last_day(now), **filters
    )
    return report.cost


def held(budget: Budget) -> Decimal:
    """What the budget's admitted operations that have not finished may still cost it."""
    total = (
        BudgetHold.objects.filter(budget=budget, operation__status__in=UNFINISHED)
        .aggregate(a=Sum("amount"))
        .get("a")
    )
    return total or ZERO


def standing(budget: Budget, *, now: datetime) -> tuple[Span, Decimal, Decimal]:
    """The budget's current period, its spend and its holds. The holds are read first: an
    operation that finishes between the two reads is then counted twice (as a hold and as
    usage), never not at all."""
    span = span_of(budget.period, now)
    holding = held(budget)
    return span, spent(budget, span, now=now), holding


def percent(used: Decimal, limit: Decimal) -> float:
    """``used`` as a percentage of ``limit`` (a limit of 0 is full as soon as anything is used)."""
    if limit <= 0:
        return float("inf") if used > 0 else 0.0
    return float(used / limit * 100)
