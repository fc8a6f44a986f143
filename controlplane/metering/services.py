"""Every write of metering: usage rows for a completed operation, counted from its request and
result (``tokens``), and the price book."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.training_sessions.models import Operation

from .models import ANY_BASE_MODEL, Meter, PricePoint, UsageRecord
from .rollup import usage_rows_write
from .tokens import operation_usage


def usage_record_for(op: Operation) -> list[UsageRecord]:
    """Write the usage rows of ``op``, which has just completed (inside its transaction).

    A row that exists already for (operation, meter) is left alone, so completing the same
    operation again never adds usage; the rows written are added to their day's totals.
    """
    return usage_rows_write(usage_rows_for(op))


def usage_rows_for(op: Operation) -> list[UsageRecord]:
    """The usage rows ``op`` has earned, unsaved: one per meter it processed tokens on."""
    counts = operation_usage(op.kind, op.payload or {}, op.result or {})
    if not counts:
        return []
    base_model = (op.plan or {}).get("base_model")  # plans name it; older ones did not
    if base_model is None:
        if op.model_id is not None:
            base_model = op.model.base_model
        elif op.sampling_session_id is not None:
            base_model = op.sampling_session.base_model
        else:
            base_model = (op.payload or {}).get("base_model") or ""
    return [
        UsageRecord(
            tenant_id=op.tenant_id,
            session_id=op.session_id,
            model_id=op.model_id,
            sampler_id=op.sampling_session_id,
            operation_id=op.pk,
            api_key=op.api_key or "",
            base_model=base_model,
            meter=meter,
            quantity=quantity,
            occurred_at=op.finished_at or timezone.now(),
        )
        for meter, quantity in counts.items()
        if quantity > 0
    ]


@transaction.atomic
def price_set(
    *,
    base_model: str,
    meter: str,
    per_million: Decimal,
    effective_from: datetime,
    currency: str = "usd",
) -> PricePoint:
    """Set the price of ``meter`` on ``base_model`` (``*``: any) from ``effective_from`` on."""
    if meter not in Meter.values:
        raise DomainError(f"meter: one of {', '.join(Meter.values)}", field="meter")
    if per_million < 0:
        raise DomainError("per_million: must not be negative", field="per_million")
    if not base_model:
        raise DomainError(
            f"base_model: a base model name or {ANY_BASE_MODEL!r}", field="base_model"
        )
    point, _ = PricePoint.objects.update_or_create(
        base_model=base_model,
        meter=meter,
        currency=currency,
        effective_from=effective_from,
        defaults={"per_million": per_million},
    )
    return point
