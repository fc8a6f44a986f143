"""Reads of access keys: a tenant's (another tenant's key is not found), and the live key an
access key id names, for the SigV4 verifier."""

from __future__ import annotations

import re

from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.errors import NotFound
from controlplane.tenants.models import Tenant

from .models import AccessKey

KEY_ID_PREFIX = "LWAK"  # what our access key ids start with (AWS's start with AKIA)
KEY_ID = re.compile(r"LWAK[A-Z2-7]{16}")


def access_keys(*, tenant: Tenant) -> QuerySet[AccessKey]:
    return (
        AccessKey.objects.filter(tenant=tenant)
        .select_related("tenant", "user", "role", "role__tenant")
        .order_by("-created_at", "-id")
    )


def access_key_get(*, tenant: Tenant, access_key_id: str) -> AccessKey:
    found = access_keys(tenant=tenant).filter(access_key_id=access_key_id).first()
    if found is None:
        raise NotFound(f"no access key {str(access_key_id)[:40]!r}", field="access_key_id")
    return found


def live_access_key(access_key_id: str) -> AccessKey | None:
    """The key with this id, if it is neither revoked nor expired."""
    if not KEY_ID.fullmatch(access_key_id):
        return None
    return (
        AccessKey.objects.select_related("tenant", "role", "role__tenant")
        .filter(access_key_id=access_key_id, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .first()
    )


def key_status(key: AccessKey, now=None) -> str:
    """active, revoked or expired."""
    now = now or timezone.now()
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"
