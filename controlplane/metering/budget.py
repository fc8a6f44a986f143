"""The monthly token budget: token-consuming operations are refused at submit once a tenant's
metered tokens of the calendar month (UTC) reach it (the budget is one of the tenant's quota
limits; the tokens are metered here)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime

from controlplane.errors import BudgetExhausted
from controlplane.metrics import QUOTA_REFUSALS
from controlplane.quotas.limits import limits_for
from controlplane.tenants.models import Tenant

from .selectors import month_tokens

_clock = time.time  # the wall clock; months are calendar months in UTC


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def budget_exhausted(*, tenant: Tenant) -> bool:
    """Whether ``token_budget_check`` would refuse the tenant now."""
    return _refusal(tenant, None) is not None


def token_budget_check(*, tenant: Tenant, now: float | None = None) -> None:
    """402 once the tenant's tokens this month reach its budget; nothing when it has none."""
    refusal = _refusal(tenant, now)
    if refusal is not None:
        QUOTA_REFUSALS.labels("monthly_token_budget").inc()
        raise refusal


def _refusal(tenant: Tenant, now: float | None) -> BudgetExhausted | None:
    budget = limits_for(tenant).monthly_token_budget
    if budget is None:
        return None
    month = datetime.fromtimestamp(_clock() if now is None else now, tz=UTC).date().replace(day=1)
    used = month_tokens(tenant=tenant, month=month)
    if used >= budget:
        resets = datetime.combine(next_month(month), datetime.min.time(), tzinfo=UTC)
        return BudgetExhausted(
            f"account {tenant.account_id} has used {used} tokens in {month:%Y-%m}, its monthly "
            f"token budget of {budget} tokens; forward, forward_backward and sample requests are "
            f"refused until the budget resets at {resets:%Y-%m-%dT%H:%M:%SZ} (UTC) or is raised"
        )
    return None
