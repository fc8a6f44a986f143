"""Writes of access keys: make one (its secret is returned once and kept only sealed), revoke
one (refused at once by every process: the change empties every process's cache), record use.
Callers authorize first (``iam:CreateAccessKey``, ``iam:RevokeAccessKey``); each write leaves an
audit row naming its actor."""

from __future__ import annotations

import base64
import os

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit.services import audit_operator
from controlplane.iam.models import Role
from controlplane.iam.services import key_expiry
from controlplane.tenants.models import Membership, Tenant
from controlplane.tenants.services import clean_name

from .models import AccessKey
from .sealing import access_key_arn, secret_new
from .selectors import KEY_ID_PREFIX

OPERATOR = "system:operator"


def _new_key_id() -> str:
    return KEY_ID_PREFIX + base64.b32encode(os.urandom(10)).decode("ascii")


@transaction.atomic
def access_key_create(
    *,
    tenant: Tenant,
    actor: str,
    name: str,
    user=None,
    role: Role | None = None,
    expires_in_days: int | None = None,
) -> tuple[AccessKey, str]:
    """The key row and its secret access key, which is shown once and kept only sealed.
    ``actor`` is the ARN of whoever asked (``system:operator`` from the command line, which
    also writes the audit row; an API or dashboard caller's row is its IAM decision's)."""
    if (user is None) == (role is None):
        raise ValueError("an access key belongs to exactly one user or role")
    name = clean_name(name, "name")
    expires_at = key_expiry(expires_in_days)
    for _ in range(5):  # 80 random bits: a clash is all but impossible, and retried
        key_id = _new_key_id()
        secret, sealed = secret_new(account_id=tenant.account_id, access_key_id=key_id)
        try:
            with transaction.atomic():
                key = AccessKey.objects.create(
                    tenant=tenant,
                    user=user,
                    role=role,
                    name=name,
                    access_key_id=key_id,
                    sealed_secret=sealed,
                    created_by=actor[:400],
                    expires_at=expires_at,
                )
            break
        except IntegrityError:
            continue
    else:  # pragma: no cover - five clashes of 80 random bits
        raise RuntimeError("could not draw an unused access key id")
    if actor == OPERATOR:
        audit_operator(
            tenant=tenant,
            action="iam:CreateAccessKey",
            resource=access_key_arn(tenant.account_id, key.access_key_id),
        )
    return key, secret


def access_key_revoke(*, key: AccessKey, actor: str) -> AccessKey:
    """Revoked for good: refused from the next request on, in every process."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        if actor == OPERATOR:
            audit_operator(
                tenant=key.tenant,
                action="iam:RevokeAccessKey",
                resource=access_key_arn(key.tenant.account_id, key.access_key_id),
            )
    return key


def access_key_touch(*, key: AccessKey) -> None:
    """Record use, at most once a minute per key (a write per request would be wasteful).
    An update, not a save: it changes nothing the caches hold, so it empties none."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


def member_access_keys_revoke(sender=None, *, membership: Membership, **_kwargs) -> None:
    """A member leaving the tenant: their access keys there stop working (``membership_removed``).
    The membership's own change empties the caches."""
    AccessKey.objects.filter(
        tenant=membership.tenant, user=membership.user, revoked_at__isnull=True
    ).update(revoked_at=timezone.now())
