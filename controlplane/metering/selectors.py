"""Reads of usage and prices, always scoped to a tenant."""

from __future__ import annotations

from collections.abc import Collection, Sequence
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
    api_key: str | None = None,
    session_in: Collection[str] | QuerySet | None = None,
) -> QuerySet[UsageRecord]:
    """The tenant's usage rows with ``start <= occurred_at < end``; only those of ``meters``,
    of session ``session_id``, made by key ``api_key`` or of the sessions ``session_in`` (ids,
    or a query of them) when given."""
    qs = UsageRecord.objects.filter(tenant=tenant, occurred_at__gte=start, occurred_at__lt=end)
    return _scoped(qs, meters, session_id, api_key, session_in)


def usage_days(
    *,
    tenant: Tenant,
    first: date,
    stop: date,
    meters: Sequence[str] | None = None,
    session_id: str | None = None,
    api_key: str | None = None,
    session_in: Collection[str] | QuerySet | None = None,
) -> QuerySet[UsageDaily]:
    """The tenant's daily totals of the UTC days ``first <= day < stop``, narrowed as
    ``usage_rows``."""
    qs = UsageDaily.objects.filter(tenant=tenant, day__gte=first, day__lt=stop)
    return _scoped(qs, meters, session_id, api_key, session_in)


def _scoped(qs: QuerySet, meters, session_id, api_key, session_in) -> QuerySet:
    if meters:
        qs = qs.filter(meter__in=list(meters))
    if session_id is not None:
        qs = qs.filter(session_id=session_id)
    if api_key is not None:
        qs = qs.filter(api_key=api_key)
    if session_in is not None:
        qs = qs.filter(session_id__in=session_in)
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
