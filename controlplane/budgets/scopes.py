"""Which budgets a request counts against (its account, its key, its session, its session's
tags) and what usage a budget counts (the same scope, as filters of the usage reports)."""

from __future__ import annotations

from django.db.models import Q

from controlplane import process_cache
from controlplane.quotas.limits import limits_for
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Session
from controlplane.training_sessions.tags import session_has_tag, sessions_tagged

from .models import DEFAULT_THRESHOLDS, Budget

OPERATOR_BUDGET = "monthly-token-budget"  # the account's monthly token budget (its quotas)


def usage_filters(budget: Budget) -> dict:
    """The usage a budget counts, as the keyword arguments of the usage reports."""
    if budget.scope == Budget.Scope.API_KEY:
        return {"api_key": budget.scope_value}
    if budget.scope == Budget.Scope.SESSION:
        return {"session_id": budget.scope_value}
    if budget.scope == Budget.Scope.TAG:
        return {"session_in": sessions_tagged(tenant=budget.tenant, tag=budget.scope_value)}
    return {}


def limit_of(budget: Budget) -> object | None:
    """The budget's amount in force; None when it has none (an operator's budget with no
    quota set: unlimited)."""
    if budget.managed_by == Budget.ManagedBy.OPERATOR:
        tokens = limits_for(budget.tenant).monthly_token_budget
        return None if tokens is None else tokens
    return budget.amount


def operator_budget(tenant: Tenant) -> Budget | None:
    """The row of the account's monthly token budget when its quotas set one (made on first
    need: it holds what every budget holds, its limit stays the quota's); else None."""
    if limits_for(tenant).monthly_token_budget is None:
        return None
    budget, _ = Budget.objects.get_or_create(
        tenant=tenant,
        name=OPERATOR_BUDGET,
        defaults={
            "scope": Budget.Scope.ACCOUNT,
            "unit": Budget.Unit.TOKENS,
            "period": Budget.Period.MONTH,
            "thresholds": list(DEFAULT_THRESHOLDS),
            "hard": True,
            "managed_by": Budget.ManagedBy.OPERATOR,
            "created_by": "system:operator",
            "description": "the account's monthly token budget (manage.py set_quota)",
        },
    )
    return budget


def budgets_over(*, tenant: Tenant, session: Session, api_key: str, hard: bool) -> list[Budget]:
    """The tenant's budgets (only hard ones when ``hard``) a request of ``session`` made with
    ``api_key`` counts against, in id order (the order their rows are locked in)."""
    operator_budget(tenant)
    match = Q(scope=Budget.Scope.ACCOUNT) | Q(scope=Budget.Scope.TAG)
    match |= Q(scope=Budget.Scope.SESSION, scope_value=session.id)
    if api_key:
        match |= Q(scope=Budget.Scope.API_KEY, scope_value=api_key)
    rows = Budget.objects.filter(match, tenant=tenant)
    if hard:
        rows = rows.filter(hard=True)
    return [
        b
        for b in rows.order_by("id")
        if (b.scope != Budget.Scope.TAG or session_has_tag(session, b.scope_value))
        and limit_of(b) is not None
    ]


_hard = process_cache.ProcessCache()  # tenant pk -> whether it has a hard budget


def has_hard_budgets(tenant: Tenant) -> bool:
    """Whether any hard budget could refuse a request of the tenant (kept as ``process_cache``
    says: a change to any budget or quota empties it)."""
    if process_cache.usable():
        found = _hard.get(tenant.pk)
        if found is not None:
            return bool(found)
        generation = _hard.generation
    found = (
        limits_for(tenant).monthly_token_budget is not None
        or Budget.objects.filter(tenant=tenant, hard=True).exists()
    )
    if process_cache.usable():
        _hard.put(tenant.pk, generation, found)
    return found
