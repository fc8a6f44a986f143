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
) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.filter(tenant=tenant)
    if action:
        events = events.filter(action__iexact=action)
    if principal:
        events = events.filter(principal=principal)
    if resource:
        events = events.filter(resource=resource)
    if allowed is not None:
        events = events.filter(allowed=allowed)
    if since:
        events = events.filter(at__gte=since)
    if until:
        events = events.filter(at__lt=until)
    if before_id:
        events = events.filter(id__lt=before_id)
    return events.order_by("-id")
