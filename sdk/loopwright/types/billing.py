"""What things cost: a session's usage and cost so far, and budgets (spend caps with alerts)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field

from ._base import RequestModel, ResponseModel

__all__ = [
    "Budget",
    "BudgetAlert",
    "BudgetCreateRequest",
    "BudgetPeriod",
    "BudgetWebhook",
    "SessionUsage",
    "UsageLine",
]

BudgetScope = Literal["account", "api_key", "session", "tag"]
BudgetUnit = Literal["tokens", "usd"]
BudgetPeriodKind = Literal["day", "week", "month", "total"]


class UsageLine(ResponseModel):
    """One base model and meter of a session's usage."""

    base_model: str
    """The base model the usage ran on."""

    meter: str
    """train_tokens, forward_tokens, prefill_tokens, sampled_tokens or storage_gb_months."""

    quantity: int
    """Tokens (storage: millionths of a GB-month)."""

    cost: str
    """US dollars, 6 decimal places."""


class SessionUsage(ResponseModel):
    """Everything a session has used so far, each priced when it was used."""

    session_id: str
    """The session."""

    currency: str = "usd"
    """The currency of the costs."""

    lines: list[UsageLine]
    """Per base model and meter."""

    total_quantity: int
    """Tokens, all meters together (storage is not tokens)."""

    total_cost: str
    """US dollars, 6 decimal places."""

    def describe(self, when: str = "so far") -> str:
        """``session sess-…: 12,345 tokens, $0.004321 so far``."""
        cost = Decimal(self.total_cost)
        return f"session {self.session_id}: {self.total_quantity:,} tokens, ${cost:,.6f} {when}"


class BudgetWebhook(ResponseModel):
    """Where a budget's alerts are sent."""

    url: str
    """The receiver."""

    secret_hint: str
    """The first characters of the signing secret."""


class BudgetPeriod(ResponseModel):
    """A budget's current period."""

    start: str
    """Its first moment (UTC, ISO 8601)."""

    end: str | None = None
    """Its end; None for a budget that never resets."""

    spent: str
    """Used so far, in the budget's unit."""

    held: str
    """What admitted requests that are still running may cost."""

    percent: float | None = None
    """Spent as a percentage of the amount."""

    remaining: str | None = None
    """The amount less what is spent and held."""

    exhausted: bool = False
    """Whether a hard budget refuses requests now."""


class BudgetAlert(ResponseModel):
    """A threshold passed this period."""

    threshold: int
    """The percent."""

    spent: str
    """What was spent when it was passed."""

    fired_at: str
    """When (UTC, ISO 8601)."""


class Budget(ResponseModel):
    """A spend cap in tokens or US dollars per period."""

    name: str
    """Its name in the account."""

    arn: str
    """Its ARN (what IAM policies name)."""

    scope: BudgetScope
    """What it counts."""

    scope_value: str | None = None
    """The key's prefix or access key id, the session id or the tag."""

    unit: BudgetUnit
    """tokens or usd."""

    period: BudgetPeriodKind
    """How often it starts again."""

    amount: str | None = None
    """The limit."""

    thresholds: list[int]
    """Percents that alert once per period."""

    hard: bool
    """Whether it refuses token-consuming requests once reached."""

    managed_by: str = "account"
    """account, or operator (the account's monthly token budget)."""

    webhook: BudgetWebhook | None = None
    """Where its alerts are sent."""

    current_period: BudgetPeriod
    """This period's spend."""

    alerts: list[BudgetAlert] = []
    """The thresholds passed this period."""

    webhook_secret: str | None = None
    """The webhook's signing secret: only in the answer that made it."""


class BudgetCreateRequest(RequestModel):
    """Make a budget."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    """1 to 64 letters, digits, '.', '_' or '-'."""

    scope: BudgetScope
    """What it counts."""

    scope_value: Annotated[str, Field(max_length=256)] | None = None
    """The key's prefix or access key id, the session id, or the tag; none for the account."""

    unit: BudgetUnit
    """tokens or usd."""

    period: BudgetPeriodKind
    """day, week, month or total."""

    amount: int | str
    """The limit: whole tokens, or dollars as a decimal string."""

    thresholds: Annotated[list[int], Field(max_length=10)] | None = None
    """Percents that alert (default 50, 80, 100)."""

    hard: bool = True
    """Refuse token-consuming requests once reached."""

    webhook_url: Annotated[str, Field(max_length=2048)] | None = None
    """Where alerts are POSTed, signed."""
