"""Reads for tenants, members and invitations, always within one tenant."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from controlplane.errors import NotFound

from .models import Invitation, Membership, Tenant


def memberships(*, tenant: Tenant) -> QuerySet[Membership]:
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("created_at")


def membership_get(*, tenant: Tenant, username: str) -> Membership:
    found = memberships(tenant=tenant).filter(user__username=username.lower()).first()
    if found is None:
        raise NotFound(f"no user {username!r}", field="username")
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
