"""A tenant is an organisation with a 12-digit account id; people join it through memberships
(the API keys that scripts authenticate with are IAM's: ``iam.models.ApiKey``)."""

from __future__ import annotations

import secrets
import uuid

from django.conf import settings
from django.db import models


def new_account_id() -> str:
    return f"{secrets.randbelow(9 * 10**11) + 10**11}"  # 12 digits, no leading zero


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account_id = models.CharField(max_length=12, unique=True, default=new_account_id)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.account_id})"


class Membership(models.Model):
    """A user's place in a tenant; the role grants a built-in policy (see ``iam.builtin``)."""

    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        MEMBER = "member"
        BILLING_VIEWER = "billing_viewer"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="one_membership_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user.get_username()} in {self.tenant.name} as {self.role}"


class Invitation(models.Model):
    """An invitation to join a tenant; the token is shown once and stored as an HMAC."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=20, choices=Membership.Role.choices)
    digest = models.CharField(max_length=64, unique=True)
    invited_by = models.CharField(max_length=400)  # the inviter's ARN
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)


class Throttle(models.Model):
    """A leaky bucket of attempts (``tenants.throttles``): logins per account and address and
    per address, sign-ups per address and in all. ``bucket`` is the kind and a digest of the
    subject; ``level`` drops at ``updated`` (epoch seconds), empty by ``drained_at``."""

    bucket = models.CharField(max_length=100, unique=True)
    level = models.FloatField()
    updated = models.FloatField()
    drained_at = models.FloatField(db_index=True)


class Subnet(models.Model):
    """A subnet of a tenant's VPC that the operator has connected workers to. Only sessions of
    that tenant may name it in ``vpc_config``."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="subnets")
    subnet_id = models.CharField(max_length=32, unique=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)


class StorageLocation(models.Model):
    """An S3 location (``s3://bucket[/prefix]``) the operator has set up for a tenant. A
    session's ``s3_output_path`` must lie inside one of its tenant's locations, so no tenant can
    make the service write into a bucket that is not theirs."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="storage_locations")
    uri = models.CharField(max_length=1024, unique=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
