"""One row per decision: who asked to do what on which resource, and what the answer was."""

from __future__ import annotations

from django.db import models

from controlplane.tenants.models import Tenant


class AuditEvent(models.Model):
    class Outcome(models.TextChoices):
        """What became of an allowed change (blank: a read, a refusal, or not known)."""

        SUCCEEDED = "succeeded"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    principal = models.CharField(max_length=400)  # an ARN, or "system:<what>" for the platform
    action = models.CharField(max_length=100)
    resource = models.CharField(max_length=1000)
    allowed = models.BooleanField()
    mutating = models.BooleanField(default=False)
    effect = models.CharField(max_length=16)  # Allow | ExplicitDeny | ImplicitDeny
    policy = models.CharField(max_length=200, blank=True)
    statement = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=1000, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=400, blank=True)
    api_key = models.CharField(max_length=32, blank=True)  # the key's visible prefix
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True, default="")
    error = models.CharField(max_length=1000, blank=True, default="")  # why it failed

    class Meta:
        indexes = [models.Index(fields=["tenant", "-at"], name="audit_tenant_recent")]
