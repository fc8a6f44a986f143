"""The hard cap: a token-consuming request is admitted while each hard budget it counts against
has spent, with what admitted operations still hold, less than its limit; it then holds the most
it can cost until it finishes. Admissions to a budget take its row lock in turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.db.models import F
from django.utils import timezone

from controlplane.errors import BudgetExhausted
from controlplane.metering.pricing import PriceBook
from controlplane.metering.reports import CURRENCY
from controlplane.metering.selectors import price_points
from controlplane.metrics import QUOTA_REFUSALS
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, Session

from .estimates import amount_for, bound
from .models import Budget, BudgetHold
from .periods import Span
from .scopes import budgets_over, has_hard_budgets, limit_of
from .spend import standing
from .wording import refusal_text

_clock = timezone.now  # the time budgets' periods are read at (tests move it)


@dataclass
class Admission:
    """What an admitted request holds on each hard budget it counts against."""

    holds: list[tuple[int, Decimal]] = field(default_factory=list)

    def hold(self, op: Operation) -> None:
        """Record the holds for ``op``, the operation the request made (in its transaction; a
        retry that found its operation holds nothing new)."""
        if self.holds:
            BudgetHold.objects.bulk_create(
                [BudgetHold(budget_id=b, operation=op, amount=a) for b, a in self.holds],
                ignore_conflicts=True,
            )


def admit(
    *,
    tenant: Tenant,
    session: Session,
    api_key: str,
    kind: str,
    payload: dict,
    base_model: str,
    now: datetime | None = None,
) -> Admission:
    """Admit a token-consuming request (inside its transaction, before its operation is
    inserted): ``BudgetExhausted`` (402) naming the first hard budget that is used up, else
    what it is to hold (``Admission.hold`` once the operation exists).

    The budgets' row locks are taken in id order (two requests never wait on each other in a
    cycle), so at most one admitted operation carries a budget over its limit: it is never
    overshot by more than one operation's cost."""
    if not has_hard_budgets(tenant):  # cached: most tenants pay nothing more
        return Admission()
    budgets = budgets_over(tenant=tenant, session=session, api_key=api_key, hard=True)
    if not budgets:
        return Admission()
    _lock([b.id for b in budgets])
    now = now or _clock()
    tokens = bound(kind, payload, base_model)
    book = PriceBook.of(price_points(currency=CURRENCY))
    admission = Admission()
    for budget in budgets:
        budget.tenant = tenant
        limit = Decimal(limit_of(budget))
        span, used, holding = standing(budget, now=now)
        if used + holding >= limit:
            QUOTA_REFUSALS.labels(_metric_label(budget)).inc()
            raise BudgetExhausted(refusal_text(budget, span, used, holding, limit, tenant=tenant))
        cost = amount_for(budget, tokens, base_model=base_model, book=book, at=now)
        admission.holds.append((budget.id, cost))
    return admission


def _lock(ids: list[int]) -> None:
    """Take the budgets' row locks until the transaction ends, in id order."""
    rows = Budget.objects.filter(pk__in=ids).order_by("id")
    if connection.features.has_select_for_update:
        list(rows.select_for_update().values_list("id", flat=True))
    else:  # SQLite: a write takes the database's one write lock
        for pk in sorted(ids):
            Budget.objects.filter(pk=pk).update(checked_usage_id=F("checked_usage_id"))


def _metric_label(budget: Budget) -> str:
    return "monthly_token_budget" if budget.managed_by == Budget.ManagedBy.OPERATOR else "budget"


def exhausted(
    budget: Budget, *, now: datetime | None = None
) -> tuple[Span, Decimal, Decimal] | None:
    """The budget's period, spend and holds when it refuses requests now; else None."""
    limit = limit_of(budget)
    if limit is None or not budget.hard:
        return None
    span, used, holding = standing(budget, now=now or _clock())
    return (span, used, holding) if used + holding >= Decimal(limit) else None
