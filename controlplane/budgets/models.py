"""Budgets (a limit in tokens or US dollars per period, on an account, an API key or access key,
a session, or a tag), the holds that admitted operations place on them until they finish, the
thresholds each period crossed, and the signed webhook deliveries those send."""

from __future__ import annotations

from django.db import models

from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation

DEFAULT_THRESHOLDS = [50, 80, 100]


class Budget(models.Model):
    class Scope(models.TextChoices):
        ACCOUNT = "account"  # everything the account uses
        API_KEY = "api_key"  # what one API key or access key pair's requests use
        SESSION = "session"  # what one session uses
        TAG = "tag"  # what every session carrying a tag uses (a project, a run)

    class Unit(models.TextChoices):
        TOKENS = "tokens"  # every token meter; storage is not tokens
        USD = "usd"  # the cost of every meter, storage included, from the price book

    class Period(models.TextChoices):
        DAY = "day"  # a UTC day
        WEEK = "week"  # Monday 00:00 UTC to the next
        MONTH = "month"  # a calendar month in UTC
        TOTAL = "total"  # never resets

    class ManagedBy(models.TextChoices):
        ACCOUNT = "account"  # made through the API or the dashboard
        OPERATOR = "operator"  # the monthly token budget of the account's quotas

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets")
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=1000, blank=True)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    # the key's prefix or access key id, the session id, or the tag; "" for the account
    scope_value = models.CharField(max_length=256, blank=True)
    unit = models.CharField(max_length=8, choices=Unit.choices)
    period = models.CharField(max_length=8, choices=Period.choices)
    # the limit; None only on the operator's budget, whose limit is the quota in force
    amount = models.DecimalField(max_digits=24, decimal_places=6, null=True, blank=True)
    thresholds = models.JSONField(default=list)  # percents of the amount, ascending
    hard = models.BooleanField(default=True)  # refuse token-consuming requests once reached
    webhook_url = models.CharField(max_length=2048, blank=True)
    webhook_secret = models.BinaryField(null=True, blank=True)  # sealed under the master key
    webhook_secret_hint = models.CharField(max_length=16, blank=True)  # its first characters
    managed_by = models.CharField(
        max_length=16, choices=ManagedBy.choices, default=ManagedBy.ACCOUNT
    )
    created_by = models.CharField(max_length=400, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # the newest usage row of the tenant its thresholds were checked against (written with
    # update(), which changes no cached row)
    checked_usage_id = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_budget_name"),
        ]
        indexes = [models.Index(fields=["tenant", "scope"], name="budget_scope_idx")]

    def __str__(self) -> str:
        return self.name


class BudgetHold(models.Model):
    """What an admitted operation may still cost a hard budget: counted while the operation is
    pending or running; when it finishes its usage rows count instead (written in the same
    transaction), so the two never both miss it."""

    id = models.BigAutoField(primary_key=True)
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="holds")
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="budget_holds")
    amount = models.DecimalField(max_digits=24, decimal_places=6)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["budget", "operation"], name="uniq_budget_hold"),
        ]


class BudgetAlert(models.Model):
    """A threshold a budget's spend crossed in one period: once per (budget, period, threshold)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_alerts")
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField()
    spent = models.DecimalField(max_digits=24, decimal_places=6)
    amount = models.DecimalField(max_digits=24, decimal_places=6)
    fired_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="uniq_budget_alert"
            ),
        ]


class WebhookDelivery(models.Model):
    """One alert sent to its budget's webhook: claimed before each attempt, retried with backoff
    until the receiver answers 2xx or the attempts run out."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # the last attempt failed; another is due at next_attempt_at
        ABANDONED = "abandoned"  # every attempt failed

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="deliveries")
    alert = models.ForeignKey(BudgetAlert, on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.CharField(max_length=40, unique=True)
    url = models.CharField(max_length=2048)
    body = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.CharField(max_length=1000, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_due_idx"),
        ]
