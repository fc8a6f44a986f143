"""A budget as the API and the dashboard show it: its settings, its current period's spend,
holds and alerts."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from controlplane.iam.resources import budget_arn

from .models import Budget, BudgetAlert
from .scopes import limit_of
from .spend import percent, standing
from .wording import raw_amount


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def budget_json(budget: Budget, *, now: datetime) -> dict:
    limit = limit_of(budget)
    span, used, holding = standing(budget, now=now)
    unit = budget.unit
    current = {
        "start": span.start.isoformat(),
        "end": _iso(span.end),
        "spent": raw_amount(used, unit),
        "held": raw_amount(holding, unit),
        "percent": None,
        "remaining": None,
        "exhausted": False,
    }
    if limit is not None:
        limit = Decimal(limit)
        share = percent(used, limit)
        current |= {
            "percent": round(share, 2) if share != float("inf") else None,
            "remaining": raw_amount(max(limit - used - holding, Decimal(0)), unit),
            "exhausted": budget.hard and used + holding >= limit,
        }
    alerts = BudgetAlert.objects.filter(budget=budget, period_start=span.start).order_by(
        "threshold"
    )
    return {
        "name": budget.name,
        "arn": budget_arn(budget.tenant, budget.name),
        "description": budget.description,
        "scope": budget.scope,
        "scope_value": budget.scope_value or None,
        "unit": unit,
        "period": budget.period,
        "amount": None if limit is None else raw_amount(limit, unit),
        "thresholds": budget.thresholds,
        "hard": budget.hard,
        "managed_by": budget.managed_by,
        "webhook": (
            {"url": budget.webhook_url, "secret_hint": budget.webhook_secret_hint + "…"}
            if budget.webhook_url
            else None
        ),
        "current_period": current,
        "alerts": [
            {
                "threshold": a.threshold,
                "spent": raw_amount(a.spent, unit),
                "fired_at": a.fired_at.isoformat(),
            }
            for a in alerts
        ],
        "created_by": budget.created_by,
        "created_at": _iso(budget.created_at),
        "updated_at": _iso(budget.updated_at),
    }
