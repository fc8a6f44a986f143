"""IAM roles (with a trust policy and inline permission policies) and users' inline policies.

Documents are stored as validated JSON (``policy.PolicyDocument``); ARNs are derived, not stored.
"""

from __future__ import annotations

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
