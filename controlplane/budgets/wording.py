"""How budgets are named in words: amounts in their unit, what a budget covers, and the refusal
a request over a hard budget gets."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from controlplane.tenants.models import Tenant

from .models import Budget
from .periods import Span

SIX = Decimal("0.000001")
REFUSED = "forward, forward_backward and sample requests"


def amount_text(value: Decimal | int, unit: str) -> str:
    """``1,234 tokens`` or ``$12.500000``."""
    value = Decimal(value)
    if unit == Budget.Unit.TOKENS:
        whole = int(value)
        return f"{whole:,} token{'' if whole == 1 else 's'}"
    return f"${value.quantize(SIX, rounding=ROUND_HALF_UP):,}"


def raw_amount(value: Decimal | int, unit: str) -> str:
    """An amount as the API writes it: tokens as a whole number, dollars with 6 decimals."""
    value = Decimal(value)
    if unit == Budget.Unit.TOKENS:
        return str(int(value))
    return str(value.quantize(SIX, rounding=ROUND_HALF_UP))


def covers(budget: Budget) -> str:
    """What the budget counts: the account, API key tml-…, session sess-…, tag "x"."""
    if budget.scope == Budget.Scope.API_KEY:
        kind = "access key" if budget.scope_value.startswith("LWAK") else "API key"
        return f"{kind} {budget.scope_value}"
    if budget.scope == Budget.Scope.SESSION:
        return f"session {budget.scope_value}"
    if budget.scope == Budget.Scope.TAG:
        return f"sessions tagged {budget.scope_value!r}"
    return "the account"


def per_period(budget: Budget) -> str:
    return "in total" if budget.period == Budget.Period.TOTAL else f"per {budget.period}"


def this_period(budget: Budget) -> str:
    return "in total" if budget.period == Budget.Period.TOTAL else f"this {budget.period}"


def refusal_text(
    budget: Budget,
    span: Span,
    used: Decimal,
    holding: Decimal,
    limit: Decimal,
    *,
    tenant: Tenant,
) -> str:
    """The 402's detail: the budget, what it has used and holds, and when it resets."""
    unit = budget.unit
    used_text = f"has used {amount_text(used, unit)} {span.label()}"
    if holding > 0:
        used_text += f" and holds {amount_text(holding, unit)} for requests still running"
    until = (
        f"until the budget resets at {span.end:%Y-%m-%dT%H:%M:%SZ} (UTC) or is raised"
        if span.end is not None
        else "until the budget is raised"
    )
    if budget.managed_by == Budget.ManagedBy.OPERATOR:
        return (
            f"account {tenant.account_id} {used_text}, its monthly token budget of "
            f"{amount_text(limit, unit)}; {REFUSED} are refused {until}"
        )
    return (
        f"budget {budget.name!r} ({amount_text(limit, unit)} {per_period(budget)} on "
        f"{covers(budget)}) {used_text}, its limit of {amount_text(limit, unit)}; {REFUSED} "
        f"it covers are refused {until} (PATCH /api/v1/billing/budgets/{budget.name})"
    )
