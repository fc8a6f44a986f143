"""Local usage summed per tenant, meter and push window, in one query (by minute or by hour)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from django.db.models import Sum
from django.db.models.functions import TruncHour, TruncMinute

from controlplane.metering.models import UsageRecord
from controlplane.tenants.models import Tenant

from .windows import window_floor

WindowKey = tuple[object, str, datetime]  # (tenant id, meter, window start)


def local_usage(
    start: datetime,
    end: datetime,
    *,
    minutes: int,
    meters: Collection[str],
    tenant: Tenant | None = None,
) -> dict[WindowKey, int]:
    """Tokens per (tenant, meter, window) of rows in [start, end); a window starts at ``start``
    at the earliest."""
    rows = UsageRecord.objects.filter(
        occurred_at__gte=start, occurred_at__lt=end, meter__in=list(meters)
    )
    if tenant is not None:
        rows = rows.filter(tenant=tenant)
    trunc = TruncHour if minutes % 60 == 0 else TruncMinute
    grouped = (
        rows.annotate(bucket=trunc("occurred_at", tzinfo=UTC))
        .values("tenant_id", "meter", "bucket")
        .annotate(quantity=Sum("quantity"))
        .order_by()
    )
    totals: dict[WindowKey, int] = {}
    for row in grouped:
        window = max(window_floor(row["bucket"], minutes), start)
        key = (row["tenant_id"], row["meter"], window)
        totals[key] = totals.get(key, 0) + int(row["quantity"])
    return totals
