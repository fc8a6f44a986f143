"""Quota writes and the concurrent-session check made inside session creation."""

from __future__ import annotations

import enum

from django.conf import settings
from django.db import transaction

from controlplane.errors import DomainError, QuotaExceeded
from controlplane.metrics import QUOTA_REFUSALS
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Session

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
    if changes:
        TenantQuota.objects.update_or_create(tenant=tenant, defaults=changes)
    return limits_for(tenant)


def session_slot_claim(*, tenant: Tenant) -> None:
    """Refuse a new session while the tenant's live (pending or active) sessions fill its quota.

    Call inside the transaction that creates the session: the tenant's row stays locked until it
    commits, so parallel creations are counted one after another and never overshoot.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("session_slot_claim must run inside the creating transaction")
    Tenant.objects.select_for_update().only("pk").get(pk=tenant.pk)
    limit = limits_for(tenant).concurrent_sessions
    live = Session.objects.filter(tenant_id=tenant.pk, state__in=Session.LIVE_STATES).count()
    if live >= limit:
        QUOTA_REFUSALS.labels("concurrent_sessions").inc()
        raise QuotaExceeded(
            f"account {tenant.account_id} has {live} live sessions (pending or active), its limit "
            f"of {limit} concurrent sessions; stop() a session (POST /api/v1/sessions/<id>/stop) "
            "or wait until an idle one expires "
            f"({settings.SESSION_IDLE_TIMEOUT_SECONDS} seconds without a heartbeat)"
        )
