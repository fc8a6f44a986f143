"""Access key pairs for AWS-style clients (boto3, sagemaker-train): an access key id, shown and
indexed, and a secret access key kept only sealed under the service's KMS master key (SigV4
needs the secret itself on the server, so a digest would not do)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.iam.models import Role
from controlplane.tenants.models import Tenant


class AccessKey(models.Model):
    """A key acts as exactly one principal: a member of the tenant, or one of its IAM roles."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="access_keys")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="access_keys",
    )
    role = models.ForeignKey(
        Role, on_delete=models.CASCADE, null=True, blank=True, related_name="access_keys"
    )
    name = models.CharField(max_length=200)
    access_key_id = models.CharField(max_length=32, unique=True)
    # the secret's 32 random bytes wrapped under the master key, bound to this key's ARN
    sealed_secret = models.BinaryField()
    created_by = models.CharField(max_length=400, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, role__isnull=True)
                | models.Q(user__isnull=True, role__isnull=False),
                name="access_key_has_one_principal",
            )
        ]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="access_key_recent")]

    @property
    def prefix(self) -> str:
        """What the audit log and the ``loopwright:ApiKeyPrefix`` condition name a key by."""
        return self.access_key_id

    def __str__(self) -> str:
        return f"{self.access_key_id} ({self.name})"

    def __repr__(self) -> str:
        return f"<AccessKey {self.access_key_id}>"
