"""Quota writes (the checks against the limits live with what they count: session slots in
``training_sessions``, the token budget in ``metering``, the request rate in ``ratelimit``)."""

from __future__ import annotations

import enum

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant
from loopwright.types.limits import MAX_REPLICAS

from .limits import Limits, limits_for
from .models import TenantQuota


class Keep(enum.Enum):
    """Leave a limit as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


def quota_set(
    *,
    tenant: Tenant,
    concurrent_sessions: int | Keep | None = KEEP,
    requests_per_minute: int | Keep | None = KEEP,
    monthly_token_budget: int | Keep | None = KEEP,
    max_replicas: int | Keep | None = KEEP,
    recorded_bytes: int | Keep | None = KEEP,
) -> Limits:
    """Override a tenant's limits (None goes back to the default); the effective limits."""
    changes = {}
    if concurrent_sessions is not KEEP:
        if concurrent_sessions is not None and concurrent_sessions < 0:
            raise DomainError("concurrent sessions must be 0 or more", field="concurrent_sessions")
        changes["concurrent_sessions"] = concurrent_sessions
    if requests_per_minute is not KEEP:
        if requests_per_minute is not None and requests_per_minute < 1:
            raise DomainError("requests per minute must be 1 or more", field="requests_per_minute")
        changes["requests_per_minute"] = requests_per_minute
    if monthly_token_budget is not KEEP:
        if monthly_token_budget is not None and monthly_token_budget < 0:
            raise DomainError(
                "monthly token budget must be 0 or more", field="monthly_token_budget"
            )
        changes["monthly_token_budget"] = monthly_token_budget
    if max_replicas is not KEEP:
        if max_replicas is not None and not 1 <= max_replicas <= MAX_REPLICAS:
            raise DomainError(
                f"max replicas must be from 1 to {MAX_REPLICAS} (the most a request may ask for)",
                field="max_replicas",
            )
        changes["max_replicas"] = max_replicas
    if recorded_bytes is not KEEP:
        if recorded_bytes is not None and recorded_bytes < 0:
            raise DomainError("recorded bytes must be 0 or more", field="recorded_bytes")
        changes["recorded_bytes"] = recorded_bytes
    if changes:
        TenantQuota.objects.update_or_create(tenant=tenant, defaults=changes)
    return limits_for(tenant)
