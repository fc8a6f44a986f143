"""Reads of budgets, always scoped to a tenant (another tenant's budget is not found), and the
alerts of their current periods that the dashboard's banner shows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from controlplane.errors import NotFound
from controlplane.tenants.models import Tenant

from .models import Budget, BudgetAlert
from .periods import span_of


def budget_get(*, tenant: Tenant, name: str, lock: bool = False) -> Budget:
    rows = Budget.objects.filter(tenant=tenant, name=name)
    if lock:
        rows = rows.select_for_update()
    found = rows.first()
    if found is None:
        raise NotFound(f"budget {name[:100]!r} not found", field="name")
    found.tenant = tenant
    return found


def budget_list(*, tenant: Tenant) -> list[Budget]:
    rows = list(Budget.objects.filter(tenant=tenant).order_by("name"))
    for row in rows:
        row.tenant = tenant
    return rows


@dataclass(frozen=True)
class Banner:
    """The highest threshold a budget crossed in its current period."""

    budget: Budget
    alert: BudgetAlert


def banners(*, tenant: Tenant, now: datetime) -> list[Banner]:
    """Each budget's highest alert of its current period, the fullest budgets first."""
    shown = []
    budgets = {b.id: b for b in budget_list(tenant=tenant)}
    if not budgets:
        return []
    starts = {pk: span_of(b.period, now).start for pk, b in budgets.items()}
    alerts = BudgetAlert.objects.filter(
        budget_id__in=list(budgets), period_start__gte=min(starts.values())
    ).order_by("-threshold")
    seen = set()
    for alert in alerts:
        budget = budgets[alert.budget_id]
        if budget.id in seen or alert.period_start != starts[budget.id]:
            continue
        seen.add(budget.id)
        shown.append(Banner(budget, alert))
    return sorted(shown, key=lambda b: -b.alert.threshold)
