"""Every write of budgets: create, update and delete one (services trust their caller to have
authorized ``actor``, whose decision the audit log holds), and the housekeeping of holds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.access_keys.models import AccessKey
from controlplane.errors import Conflict, DomainError, NotFound
from controlplane.iam.models import ApiKey
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, Session
from controlplane.training_sessions.tags import tag_checked

from .alerts import budget_check
from .models import DEFAULT_THRESHOLDS, Budget, BudgetHold
from .scopes import OPERATOR_BUDGET
from .selectors import budget_get
from .webhook_secrets import HINT, secret_new
from .webhooks import url_checked

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_AMOUNT = Decimal(10) ** 15
MAX_THRESHOLDS = 10
MAX_THRESHOLD = 1000  # percent
MAX_DESCRIPTION = 1000
MAX_BUDGETS = 100  # per account


@dataclass(frozen=True)
class Made:
    """A budget written, and its webhook secret when one was just made (shown once)."""

    budget: Budget
    webhook_secret: str | None = None


def name_checked(name: object) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise DomainError(
            "name: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="name",
        )
    return name


def amount_checked(raw: object, unit: str) -> Decimal:
    """A limit of 0 to 10^15: whole tokens, or dollars with at most 6 decimals."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise DomainError("amount: a number (or a decimal string)", field="amount")
    try:
        value = Decimal(str(raw))
    except InvalidOperation:
        raise DomainError("amount: a number (or a decimal string)", field="amount") from None
    if not value.is_finite() or not 0 <= value <= MAX_AMOUNT:
        raise DomainError(f"amount: from 0 to {MAX_AMOUNT:,}", field="amount")
    if unit == Budget.Unit.TOKENS and value != value.to_integral_value():
        raise DomainError("amount: a whole number of tokens", field="amount")
    if value.as_tuple().exponent < -6:  # type: ignore[operator]
        raise DomainError("amount: at most 6 decimal places", field="amount")
    return value


def thresholds_checked(raw: object) -> list[int]:
    """1 to 10 distinct whole percents from 1 to 1,000, ascending."""
    if not isinstance(raw, list) or len(raw) > MAX_THRESHOLDS:
        raise DomainError(
            f"thresholds: a list of at most {MAX_THRESHOLDS} percents", field="thresholds"
        )
    for value in raw:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DomainError("thresholds: whole percents", field="thresholds")
        if not 1 <= value <= MAX_THRESHOLD:
            raise DomainError(
                f"thresholds: each from 1 to {MAX_THRESHOLD} (percent)", field="thresholds"
            )
    return sorted(set(raw))


def choice_checked(value: object, choices: type, field: str) -> str:
    if value not in choices.values:
        raise DomainError(f"{field}: one of {', '.join(choices.values)}", field=field)
    return str(value)


def scope_value_checked(tenant: Tenant, scope: str, value: object) -> str:
    """What the scope names, which must be the account's: a key, a session, or a tag."""
    if scope == Budget.Scope.ACCOUNT:
        if value not in (None, ""):
            raise DomainError("scope_value: none for the account scope", field="scope_value")
        return ""
    if scope == Budget.Scope.TAG:
        return tag_checked(value, field="scope_value")
    if not isinstance(value, str) or not value or len(value) > 128:
        raise DomainError(
            f"scope_value: the {scope.replace('_', ' ')} to count", field="scope_value"
        )
    if scope == Budget.Scope.API_KEY:
        found = (
            ApiKey.objects.filter(tenant=tenant, prefix=value).exists()
            or AccessKey.objects.filter(tenant=tenant, access_key_id=value).exists()
        )
        what = "API key (its prefix) or access key id"
    else:
        found = Session.objects.filter(tenant=tenant, id=value).exists()
        what = "session"
    if not found:  # another account's is not found either
        raise NotFound(f"scope_value: no {what} {value!r} in this account", field="scope_value")
    return value


@transaction.atomic
def budget_create(
    *,
    tenant: Tenant,
    actor: str,
    name: object,
    scope: object,
    unit: object,
    period: object,
    amount: object,
    scope_value: object = None,
    thresholds: object = None,
    hard: bool = True,
    webhook_url: object = None,
    description: str | None = "",
) -> Made:
    name = name_checked(name)
    if name == OPERATOR_BUDGET:
        raise Conflict(f"name: {name!r} is the account's monthly token budget", field="name")
    scope = choice_checked(scope, Budget.Scope, "scope")
    unit = choice_checked(unit, Budget.Unit, "unit")
    budget = Budget(
        tenant=tenant,
        name=name,
        description=description or "",
        scope=scope,
        scope_value=scope_value_checked(tenant, scope, scope_value),
        unit=unit,
        period=choice_checked(period, Budget.Period, "period"),
        amount=amount_checked(amount, unit),
        thresholds=(
            list(DEFAULT_THRESHOLDS) if thresholds is None else thresholds_checked(thresholds)
        ),
        hard=hard,
        created_by=actor,
    )
    if Budget.objects.filter(tenant=tenant).count() >= MAX_BUDGETS:
        raise DomainError(f"an account has at most {MAX_BUDGETS} budgets", field="name")
    secret = _webhook(budget, webhook_url) if webhook_url else None
    try:
        with transaction.atomic():
            budget.save()
    except IntegrityError:
        raise Conflict(f"budget {name!r} exists already", field="name") from None
    budget_check(budget, now=timezone.now())
    return Made(budget, secret)


def _webhook(budget: Budget, url: object) -> str:
    """Point the budget's webhook at ``url`` with a fresh secret (returned, to show once)."""
    budget.webhook_url = url_checked(url)
    secret, sealed = secret_new(account_id=budget.tenant.account_id, name=budget.name)
    budget.webhook_secret, budget.webhook_secret_hint = sealed, secret[:HINT]
    return secret


@transaction.atomic
def budget_update(*, tenant: Tenant, actor: str, name: str, changes: dict) -> Made:
    """Change what ``changes`` names (amount, period, thresholds, hard, description,
    webhook_url: a URL or None to remove it, rotate_webhook_secret); the alerts of the new
    settings are checked at once."""
    budget = budget_get(tenant=tenant, name=name, lock=True)
    _not_operators(budget)
    if "amount" in changes:
        budget.amount = amount_checked(changes["amount"], budget.unit)
    if "period" in changes:
        budget.period = choice_checked(changes["period"], Budget.Period, "period")
    if "thresholds" in changes:
        budget.thresholds = thresholds_checked(changes["thresholds"])
    if "hard" in changes:
        budget.hard = bool(changes["hard"])
    if "description" in changes:
        budget.description = changes["description"] or ""
    secret = None
    url = changes.get("webhook_url", budget.webhook_url or None)
    if "webhook_url" in changes and url is None:
        budget.webhook_url, budget.webhook_secret, budget.webhook_secret_hint = "", None, ""
    elif url is not None and (
        changes.get("rotate_webhook_secret")
        or not budget.webhook_secret
        or url != budget.webhook_url
    ):
        secret = _webhook(budget, url)
    elif changes.get("rotate_webhook_secret"):
        raise DomainError("rotate_webhook_secret: the budget has no webhook", field="webhook_url")
    budget.checked_usage_id = 0
    budget.save()
    budget_check(budget, now=timezone.now())
    return Made(budget, secret)


@transaction.atomic
def budget_delete(*, tenant: Tenant, actor: str, name: str) -> None:
    budget = budget_get(tenant=tenant, name=name, lock=True)
    _not_operators(budget)
    budget.delete()


def _not_operators(budget: Budget) -> None:
    if budget.managed_by == Budget.ManagedBy.OPERATOR:
        raise DomainError(
            f"budget {budget.name!r} is the account's monthly token budget, which an operator "
            "sets (manage.py set_quota --monthly-token-budget); make a budget of your own to "
            "cap the account lower",
            field="name",
        )


def holds_prune() -> int:
    """Forget the holds of finished operations (they count no more); how many went."""
    deleted, _ = BudgetHold.objects.filter(operation__status__in=Operation.FINISHED).delete()
    return deleted
