"""A tenant's effective limits: its overrides, else the settings' defaults."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from controlplane import process_cache
from controlplane.tenants.models import Tenant

from .models import TenantQuota

# A tenant's limits, per tenant, kept as ``process_cache`` says (``QuotasConfig.ready`` connects
# the rows they come from).
_cache = process_cache.ProcessCache()


@dataclass(frozen=True)
class Limits:
    concurrent_sessions: int
    requests_per_minute: int
    monthly_token_budget: int | None  # tokens per calendar month (UTC); None: unlimited
    max_replicas: int  # data-parallel replicas one training model may ask for
    recorded_bytes: int  # bytes of recorded sampled sequences kept at once


def limits_for(tenant: Tenant) -> Limits:
    if not process_cache.usable():
        return _limits_read(tenant)
    found = _cache.get(tenant.pk)
    if found is None:
        generation = _cache.generation
        found = _limits_read(tenant)
        _cache.put(tenant.pk, generation, found)
    return found


def _limits_read(tenant: Tenant) -> Limits:
    row = TenantQuota.objects.filter(tenant_id=tenant.pk).first()
    sessions = row.concurrent_sessions if row else None
    rate = row.requests_per_minute if row else None
    budget = row.monthly_token_budget if row else None
    replicas = row.max_replicas if row else None
    recorded = row.recorded_bytes if row else None
    return Limits(
        concurrent_sessions=settings.MAX_CONCURRENT_SESSIONS if sessions is None else sessions,
        requests_per_minute=settings.REQUESTS_PER_MINUTE if rate is None else rate,
        monthly_token_budget=settings.MONTHLY_TOKEN_BUDGET if budget is None else budget,
        max_replicas=settings.MAX_REPLICAS if replicas is None else replicas,
        recorded_bytes=settings.MAX_RECORDED_BYTES if recorded is None else recorded,
    )
