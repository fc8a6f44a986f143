"""Customer keys of a tenant and, for local keys, their versioned material (wrapped, never plain)."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from controlplane.tenants.models import Tenant


class KmsKey(models.Model):
    """A tenant's key: ``arn:loopwright:kms::<account>:key/<id>``; material lives in versions."""

    class Provider(models.TextChoices):
        LOCAL = "local", "Loopwright"
        AWS = "aws", "AWS KMS"

    class State(models.TextChoices):
        ENABLED = "Enabled"
        DISABLED = "Disabled"
        PENDING_DELETION = "PendingDeletion"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="kms_keys")
    arn = models.CharField(max_length=200, unique=True)
    alias = models.CharField(max_length=256, null=True, blank=True)
    description = models.TextField(blank=True)
    provider = models.CharField(max_length=8, choices=Provider.choices, default=Provider.LOCAL)
    aws_key_id = models.CharField(max_length=2048, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ENABLED)
    current_version = models.IntegerField(default=1)  # 0 for AWS keys: AWS versions them itself
    deletion_date = models.DateTimeField(null=True, blank=True)
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "alias"],
                condition=Q(alias__isnull=False),
                name="uniq_kms_alias_per_tenant",
            ),
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(is_default=True), name="one_default_kms_key"
            ),
            models.CheckConstraint(
                condition=Q(state__in=["Enabled", "Disabled", "PendingDeletion"]),
                name="kms_key_state_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "created_at"], name="kms_key_tenant_created"),
            models.Index(fields=["state", "deletion_date"], name="kms_key_deletion_due"),
        ]

    def __str__(self) -> str:
        return self.arn


class KmsKeyVersion(models.Model):
    """One version of a local key's 32-byte material, wrapped under the server master key."""

    key = models.ForeignKey(KmsKey, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    material = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "version"], name="uniq_kms_key_version"),
        ]

    def __str__(self) -> str:
        return f"{self.key.arn} v{self.version}"
