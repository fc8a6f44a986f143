"""A tenant's Stripe customer, the meter events of closed usage windows (one per tenant, meter and
window, with its delivery state), and how far usage has been turned into meter events."""

from __future__ import annotations

from django.db import models

from controlplane.tenants.models import Tenant


class StripeCustomer(models.Model):
    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="stripe_customer")
    customer_id = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.tenant.account_id} -> {self.customer_id}"


class MeterEventBatch(models.Model):
    """The usage of one tenant and meter in one window, sent to Stripe as one meter event."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # retried after a backoff

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="meter_events")
    meter = models.CharField(max_length=32)
    event_name = models.CharField(max_length=100)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    quantity = models.BigIntegerField()
    identifier = models.CharField(max_length=100, unique=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    stripe_customer_id = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "meter", "window_start"], name="uniq_meter_event_window"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="meter_event_due_idx"),
            models.Index(fields=["tenant", "window_start"], name="meter_event_tenant_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.identifier} {self.quantity} {self.status}"


class PushCursor(models.Model):
    """Usage before ``through`` has been turned into meter event rows (windows never overlap)."""

    name = models.CharField(max_length=40, primary_key=True)
    through = models.DateTimeField()
