"""Soft thresholds: a threshold a budget's spend passes in a period is recorded once (unique per
budget, period and threshold) with an audit row and, for a budget with a webhook, a delivery
queued in the same transaction (sent by housekeeping after it commits)."""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit.services import audit_system
from controlplane.iam.resources import budget_arn
from controlplane.metering.models import UsageRecord

from .models import Budget, BudgetAlert, WebhookDelivery
from .periods import Span, span_of
from .scopes import limit_of
from .spend import percent, spent
from .wording import amount_text, covers, raw_amount

ALERT_ACTION = "billing:BudgetThresholdReached"
# usage this recent is checked again even if no newer row appeared: rows commit a little out of
# the order of their ids
RECENT = timedelta(minutes=2)


def budgets_check(*, now: datetime | None = None, tenant=None) -> list[BudgetAlert]:
    """Check every budget (one tenant's, or all) whose tenant has usage it has not been checked
    against; the alerts fired."""
    now = now or timezone.now()
    rows = Budget.objects.select_related("tenant").order_by("id")
    if tenant is not None:
        rows = rows.filter(tenant=tenant)
    newest: dict[object, tuple[int, bool]] = {}
    fired: list[BudgetAlert] = []
    for budget in rows:
        if budget.tenant_id not in newest:
            newest[budget.tenant_id] = _newest_usage(budget.tenant_id, now)
        latest, recent = newest[budget.tenant_id]
        if budget.checked_usage_id and latest <= budget.checked_usage_id and not recent:
            continue
        fired += budget_check(budget, now=now)
        Budget.objects.filter(pk=budget.pk).update(checked_usage_id=max(latest, 1))
    return fired


def _newest_usage(tenant_id: object, now: datetime) -> tuple[int, bool]:
    """The id of the tenant's newest usage row, and whether any is recent."""
    rows = UsageRecord.objects.filter(tenant_id=tenant_id)
    found = rows.order_by("-id").values_list("id", flat=True).first()
    return found or 0, rows.filter(occurred_at__gte=now - RECENT).exists()


def budget_check(budget: Budget, *, now: datetime) -> list[BudgetAlert]:
    """The budget's thresholds crossed now and not before in this period, each recorded once."""
    limit = limit_of(budget)
    if limit is None or not budget.thresholds:
        return []
    limit = Decimal(limit)
    span = span_of(budget.period, now)
    used = spent(budget, span, now=now)
    share = percent(used, limit)
    fired = []
    for threshold in sorted(budget.thresholds):
        if share >= threshold:
            alert = _fire(budget, span, threshold, used, limit, now=now)
            if alert is not None:
                fired.append(alert)
    return fired


def _fire(
    budget: Budget, span: Span, threshold: int, used: Decimal, limit: Decimal, *, now: datetime
) -> BudgetAlert | None:
    """Record the alert, its audit row and its delivery; None if it was recorded already."""
    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                tenant=budget.tenant,
                budget=budget,
                period_start=span.start,
                threshold=threshold,
                spent=used,
                amount=limit,
            )
            audit_system(
                tenant=budget.tenant,
                action=ALERT_ACTION,
                resource=budget_arn(budget.tenant, budget.name),
                reason=alert_text(budget, span, threshold, used, limit)[:1000],
            )
            if budget.webhook_url and budget.webhook_secret:
                _queue(budget, alert, span, now=now)
    except IntegrityError:  # fired already (by a concurrent check)
        return None
    return alert


def alert_text(budget: Budget, span: Span, threshold: int, used: Decimal, limit: Decimal) -> str:
    unit = budget.unit
    what = "reached" if threshold >= 100 else f"passed {threshold}% of"
    refuses = (
        "; token-consuming requests it covers are refused until it resets or is raised"
        if budget.hard and threshold >= 100
        else ""
    )
    return (
        f"budget {budget.name!r} ({covers(budget)}) has used {amount_text(used, unit)} "
        f"{span.label()}: it {what} its limit of {amount_text(limit, unit)}{refuses}"
    )


def event_body(budget: Budget, alert: BudgetAlert, span: Span, event_id: str) -> dict:
    """What a webhook receives (docs/billing.md shows one)."""
    tenant = budget.tenant
    return {
        "id": event_id,
        "type": "budget.threshold_reached",
        "created": int(alert.fired_at.timestamp()),
        "account_id": tenant.account_id,
        "budget": {
            "name": budget.name,
            "arn": budget_arn(tenant, budget.name),
            "scope": budget.scope,
            "scope_value": budget.scope_value or None,
            "unit": budget.unit,
            "period": budget.period,
            "amount": raw_amount(alert.amount, budget.unit),
            "hard": budget.hard,
        },
        "threshold": alert.threshold,
        "period_start": span.start.isoformat(),
        "period_end": span.end.isoformat() if span.end else None,
        "spent": raw_amount(alert.spent, budget.unit),
        "percent": round(percent(alert.spent, alert.amount), 2) if alert.amount > 0 else None,
        "message": alert_text(budget, span, alert.threshold, alert.spent, alert.amount),
    }


def _queue(budget: Budget, alert: BudgetAlert, span: Span, *, now: datetime) -> None:
    event_id = f"evt_{secrets.token_hex(16)}"
    body = json.dumps(event_body(budget, alert, span, event_id), separators=(",", ":"))
    WebhookDelivery.objects.create(
        tenant=budget.tenant,
        budget=budget,
        alert=alert,
        event_id=event_id,
        url=budget.webhook_url,
        body=body,
        next_attempt_at=now,  # due at once: the next housekeeping run sends it
    )
