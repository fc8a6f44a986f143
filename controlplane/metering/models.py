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
    # forward_backward, forward and sample: the image tokens of their inputs (which the three
    # meters above then leave out)
    IMAGE_TOKENS = "image_tokens"
    # checkpoint storage, in millionths of a GB-month (10^9 bytes kept 720 hours): its price
    # per million is the price of one GB-month
    STORAGE_GB_MONTHS = "storage_gb_months"


# the meters that count tokens (what a token budget counts; storage is not tokens)
TOKEN_METERS = (
    Meter.TRAIN_TOKENS,
    Meter.FORWARD_TOKENS,
    Meter.PREFILL_TOKENS,
    Meter.SAMPLED_TOKENS,
    Meter.IMAGE_TOKENS,
)


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
    # the key whose request made the operation (its visible prefix, or an access key id); ""
    # for storage and for operations no key made
    api_key = models.CharField(max_length=32, blank=True, default="")
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
            models.Index(fields=["tenant", "api_key", "occurred_at"], name="usage_key_time_idx"),
        ]


class UsageDaily(models.Model):
    """The tokens of one UTC day per tenant, session, key, base model and meter: the sum of
    those usage rows, kept in the transaction that writes them (reports read whole days here)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    session_id = models.CharField(max_length=64, blank=True, default="")  # "": no session
    api_key = models.CharField(max_length=32, blank=True, default="")  # "": no key
    base_model = models.CharField(max_length=200)
    meter = models.CharField(max_length=32, choices=Meter.choices)
    quantity = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "day", "session_id", "api_key", "base_model", "meter"],
                name="uniq_usage_daily_key",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "session_id", "day"], name="usage_daily_session_idx"),
            models.Index(fields=["tenant", "api_key", "day"], name="usage_daily_key_idx"),
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


class StoredObject(models.Model):
    """Bytes a tenant keeps in checkpoint storage over a span of time: one row per checkpoint
    as stored (saving it again to its path closes the row and opens another; deleting it closes
    it). The storage meter bills from these rows; they outlive their checkpoints."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="stored_objects")
    session_id = models.CharField(max_length=64, blank=True)
    base_model = models.CharField(max_length=200)
    checkpoint_id = models.BigIntegerField()  # the Checkpoint row's id (no constraint: it goes)
    size_bytes = models.BigIntegerField()
    stored_from = models.DateTimeField()
    stored_until = models.DateTimeField(null=True, blank=True)  # None: still stored

    class Meta:
        indexes = [
            models.Index(fields=["checkpoint_id", "stored_until"], name="stored_by_checkpoint"),
            models.Index(fields=["stored_until"], name="stored_until_idx"),
        ]


class StorageAccrual(models.Model):
    """Storage kept by one tenant's session on one base model since metering began, in exact
    byte-microseconds, and how much of it has been billed (whole millionths of a GB-month):
    each hour bills what the total has grown past the units billed, so rounding never adds
    up."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session_id = models.CharField(max_length=64, blank=True)
    base_model = models.CharField(max_length=200)
    byte_microseconds = models.DecimalField(max_digits=38, decimal_places=0, default=0)
    units = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "session_id", "base_model"], name="uniq_storage_accrual"
            ),
        ]


class MeterCursor(models.Model):
    """How far a meter computed from time spans (storage) has billed: every hour before
    ``through``, exactly once (the cursor moves in the transaction that writes the usage)."""

    name = models.CharField(max_length=32, primary_key=True)
    through = models.DateTimeField()
