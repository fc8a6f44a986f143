"""Reads of usage and prices, always scoped to a tenant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from django.db.models import QuerySet, Sum

from controlplane.tenants.models import Tenant

from .models import PricePoint, UsageDaily, UsageRecord


def usage_rows(
    *,
    tenant: Tenant,
    start: datetime,
    end: datetime,
    meters: Sequence[str] | None = None,
    session_id: str | None = None,
) -> QuerySet[UsageRecord]:
    """The tenant's usage rows with ``start <= occurred_at < end``."""
    qs = UsageRecord.objects.filter(tenant=tenant, occurred_at__gte=start, occurred_at__lt=end)
    if meters:
        qs = qs.filter(meter__in=list(meters))
    if session_id is not None:
        qs = qs.filter(session_id=session_id)
    return qs


def usage_days(
    *,
    tenant: Tenant,
    first: date,
    stop: date,
    meters: Sequence[str] | None = None,
    session_id: str | None = None,
) -> QuerySet[UsageDaily]:
    """The tenant's daily totals of the UTC days ``first <= day < stop``."""
    qs = UsageDaily.objects.filter(tenant=tenant, day__gte=first, day__lt=stop)
    if meters:
        qs = qs.filter(meter__in=list(meters))
    if session_id is not None:
        qs = qs.filter(session_id=session_id)
    return qs


def month_tokens(*, tenant: Tenant, month: date) -> int:
    """The tenant's tokens of every meter in the calendar month (UTC) that starts on ``month``."""
    stop = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    total = usage_days(tenant=tenant, first=month, stop=stop).aggregate(q=Sum("quantity"))["q"]
    return total or 0


def session_usage_rows(*, tenant: Tenant, session_id: str) -> QuerySet[UsageRecord]:
    return UsageRecord.objects.filter(tenant=tenant, session_id=session_id)


def price_points(*, currency: str = "usd") -> list[PricePoint]:
    return list(PricePoint.objects.filter(currency=currency).order_by("effective_from", "id"))
