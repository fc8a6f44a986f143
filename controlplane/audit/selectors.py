"""Reads of the audit log, always within one tenant, newest first."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from controlplane.tenants.models import Tenant

from .models import AuditEvent


def audit_events(
    *,
    tenant: Tenant,
    action: str | None = None,
    principal: str | None = None,
    resource: str | None = None,
    allowed: bool | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before_id: int | None = None,
    action_contains: str | None = None,
    resource_contains: str | None = None,
    changes_only: bool = False,
    outcome: str | None = None,
) -> QuerySet[AuditEvent]:
    """``action``/``resource``: exactly (actions in any case); ``*_contains``: any part of them,
    in any case. ``changes_only``: what writes (or tries to), not reads."""
    events = AuditEvent.objects.filter(tenant=tenant)
    if action:
        events = events.filter(action__iexact=action)
    if action_contains:
        events = events.filter(action__icontains=action_contains)
    if principal:
        events = events.filter(principal=principal)
    if resource:
        events = events.filter(resource=resource)
    if resource_contains:
        events = events.filter(resource__icontains=resource_contains)
    if changes_only:
        events = events.filter(mutating=True)
    if outcome is not None:
        events = events.filter(outcome=outcome)
    if allowed is not None:
        events = events.filter(allowed=allowed)
    if since:
        events = events.filter(at__gte=since)
    if until:
        events = events.filter(at__lt=until)
    if before_id:
        events = events.filter(id__lt=before_id)
    return events.order_by("-id")
