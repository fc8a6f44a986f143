"""IAM roles (with a trust policy and inline permission policies), users' inline policies and
the API keys that act as a member or a role.

Documents are stored as validated JSON (``policy.PolicyDocument``); ARNs are derived, not stored.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.tenants.models import Membership, Tenant

from .arns import build_arn

SESSIONS_SERVICE = "sessions.loopwright.dev"  # the principal that assumes a session's role


class Role(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="roles")
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=1000, blank=True)
    trust_policy = models.JSONField()
    created_by = models.CharField(max_length=400, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="role_name_unique_in_tenant")
        ]

    @property
    def arn(self) -> str:
        return build_arn("iam", self.tenant.account_id, "role", self.name)

    def __str__(self) -> str:
        return self.arn


class RolePolicy(models.Model):
    role = models.ForeignKey(Role, on_delete=models.CASCADE, related_name="policies")
    name = models.CharField(max_length=128)
    document = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["role", "name"], name="role_policy_name_unique")
        ]


class UserPolicy(models.Model):
    """An inline policy of one member, evaluated with the built-in policy of their membership."""

    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="policies")
    name = models.CharField(max_length=128)
    document = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["membership", "name"], name="user_policy_name_unique")
        ]


class ApiKey(models.Model):
    """``tml-<prefix>.<secret>``: the prefix is shown and indexed, the whole key is HMAC'd.

    A key acts as exactly one principal: a member of the tenant, or one of its IAM roles. The
    table keeps the name it was created with (``tenants_apikey``).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_keys",
    )
    role = models.ForeignKey(
        Role, on_delete=models.CASCADE, null=True, blank=True, related_name="api_keys"
    )
    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=32, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tenants_apikey"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, role__isnull=True)
                | models.Q(user__isnull=True, role__isnull=False),
                name="api_key_has_one_principal",
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"
