"""Usage rows (tokens per operation and meter, written when the operation completes) and the
price book that turns them into money."""

from __future__ import annotations

from django.db import models

from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import (
    Operation,
    SamplingSession,
    Session,
    TrainingModel,
)

ANY_BASE_MODEL = "*"


class Meter(models.TextChoices):
    TRAIN_TOKENS = "train_tokens"  # forward_backward: every datum's model input
    FORWARD_TOKENS = "forward_tokens"  # forward: every datum's model input
    PREFILL_TOKENS = "prefill_tokens"  # sample: the prompt, once per request
    SAMPLED_TOKENS = "sampled_tokens"  # sample: the tokens of every returned sequence


def _kept(to: type[models.Model], related_name: str) -> models.ForeignKey:
    """A reference that outlives its target: usage is billed even after a session is deleted."""
    return models.ForeignKey(
        to,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name=related_name,
    )


class UsageRecord(models.Model):
    """Tokens of one meter processed by one operation; at most one row per (operation, meter)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_records")
    session = _kept(Session, "usage_records")
    model = _kept(TrainingModel, "usage_records")
    sampler = _kept(SamplingSession, "usage_records")
    operation = _kept(Operation, "usage_records")
    base_model = models.CharField(max_length=200)
    meter = models.CharField(max_length=32, choices=Meter.choices)
    quantity = models.BigIntegerField()
    occurred_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["operation", "meter"], name="uniq_usage_op_meter"),
        ]
        indexes = [
            models.Index(fields=["tenant", "occurred_at"], name="usage_tenant_time_idx"),
            models.Index(fields=["session", "meter"], name="usage_session_meter_idx"),
        ]


class UsageDaily(models.Model):
    """The tokens of one UTC day per tenant, session, base model and meter: the sum of those
    usage rows, kept in the transaction that writes them (reports read whole days here)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    session_id = models.CharField(max_length=64, blank=True, default="")  # "": no session
    base_model = models.CharField(max_length=200)
    meter = models.CharField(max_length=32, choices=Meter.choices)
    quantity = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "day", "session_id", "base_model", "meter"],
                name="uniq_usage_daily",
            ),
        ]


class PricePoint(models.Model):
    """A price per million tokens of one meter on one base model (``*``: any), from a time on."""

    id = models.BigAutoField(primary_key=True)
    base_model = models.CharField(max_length=200, default=ANY_BASE_MODEL)
    meter = models.CharField(max_length=32, choices=Meter.choices)
    per_million = models.DecimalField(max_digits=18, decimal_places=6)
    currency = models.CharField(max_length=3, default="usd")
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["base_model", "meter", "currency", "effective_from"],
                name="uniq_price_point",
            ),
        ]
        ordering = ["base_model", "meter", "effective_from"]

    def __str__(self) -> str:
        return f"{self.base_model} {self.meter} {self.per_million} {self.currency}/M from {self.effective_from:%Y-%m-%d}"
