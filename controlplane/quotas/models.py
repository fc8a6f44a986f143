"""A tenant's quota overrides (a missing row or an empty field means the setting's default) and
the per-minute request counters of the database rate limiter."""

from __future__ import annotations

from django.db import models

from controlplane.tenants.models import Tenant


class TenantQuota(models.Model):
    tenant = models.OneToOneField(
        Tenant, primary_key=True, on_delete=models.CASCADE, related_name="quota"
    )
    concurrent_sessions = models.PositiveIntegerField(null=True, blank=True)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    # Tokens per calendar month (UTC) across the tenant's usage; refused at submit once reached.
    monthly_token_budget = models.PositiveBigIntegerField(null=True, blank=True)
    # The most data-parallel replicas one training model may ask for.
    max_replicas = models.PositiveSmallIntegerField(null=True, blank=True)
    # Bytes of recorded sampled sequences (record_stability_info) the tenant may keep at once.
    recorded_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quota of {self.tenant_id}"


class RequestCount(models.Model):
    """Requests a tenant made in one minute (``minute`` counts minutes since the epoch)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    minute = models.BigIntegerField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "minute"], name="one_count_per_minute")
        ]
        indexes = [models.Index(fields=["minute"])]
