"""Reads for tenants, members and API keys, always within one tenant."""

from __future__ import annotations

import hmac

from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.errors import NotFound

from .models import ApiKey, Invitation, Membership, Tenant
from .services import key_digest, split_key


def api_key_for(raw: str) -> ApiKey | None:
    """The live key matching ``raw``, compared in constant time; None if unknown or dead."""
    prefix = split_key(raw)
    if prefix is None:
        return None
    now = timezone.now()
    key = (
        ApiKey.objects.select_related("tenant", "role", "role__tenant")
        .filter(prefix=prefix, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if key is None or not hmac.compare_digest(key.digest, key_digest(raw)):
        return None
    return key


def memberships(*, tenant: Tenant) -> QuerySet[Membership]:
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("created_at")


def membership_get(*, tenant: Tenant, username: str) -> Membership:
    found = memberships(tenant=tenant).filter(user__username=username.lower()).first()
    if found is None:
        raise NotFound(f"no user {username!r}", field="username")
    return found


def api_keys(*, tenant: Tenant) -> QuerySet[ApiKey]:
    return (
        ApiKey.objects.filter(tenant=tenant)
        .select_related("user", "role", "role__tenant")
        .order_by("-created_at")
    )


def api_key_get(*, tenant: Tenant, prefix: str) -> ApiKey:
    found = api_keys(tenant=tenant).filter(prefix=prefix).first()
    if found is None:
        raise NotFound(f"no API key {prefix!r}", field="prefix")
    return found


def invitations_pending(*, tenant: Tenant) -> QuerySet[Invitation]:
    """Invitations not yet accepted and not expired, newest first."""
    return Invitation.objects.filter(
        tenant=tenant, accepted_at__isnull=True, expires_at__gt=timezone.now()
    ).order_by("-created_at")


def invitation_get(*, tenant: Tenant, invitation_id: int) -> Invitation:
    try:
        return Invitation.objects.get(tenant=tenant, pk=invitation_id)
    except Invitation.DoesNotExist:
        raise NotFound(f"invitation {invitation_id} not found", field="id") from None
