"""Requests per minute per tenant: a fixed one-minute window counted in Redis when one is
configured, else in the database (one upsert per request)."""

from __future__ import annotations

import logging
import math
import time
from functools import cache

from django.conf import settings
from django.db import connection, transaction

from controlplane.errors import Throttled
from controlplane.metrics import QUOTA_REFUSALS
from controlplane.tenants.models import Tenant

from .limits import limits_for
from .models import RequestCount

log = logging.getLogger("loopwright.quotas")
WINDOW_SECONDS = 60
_clock = time.time  # the wall clock; windows are aligned to whole minutes


def request_rate_check(*, tenant: Tenant, now: float | None = None) -> None:
    """Count one request of the tenant; 429 with Retry-After once its window is over the limit."""
    now = _clock() if now is None else now
    minute = int(now // WINDOW_SECONDS)
    limit = limits_for(tenant).requests_per_minute
    count = _hit(tenant, minute)
    if count is not None and count > limit:
        wait = max(1, math.ceil((minute + 1) * WINDOW_SECONDS - now))
        QUOTA_REFUSALS.labels("requests_per_minute").inc()
        raise Throttled(
            f"account {tenant.account_id} is over its limit of {limit} requests per minute; "
            f"the window resets in {wait} seconds",
            retry_after=wait,
        )


def _hit(tenant: Tenant, minute: int) -> int | None:
    url = settings.RATE_LIMIT_REDIS_URL
    return _redis_hit(url, tenant, minute) if url else _database_hit(tenant, minute)


def _database_hit(tenant: Tenant, minute: int) -> int:
    table = connection.ops.quote_name(RequestCount._meta.db_table)
    tenant_id = RequestCount._meta.get_field("tenant").get_db_prep_value(tenant.pk, connection)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # a count lost in a crash is fine; a flush is slow
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        cursor.execute(
            f"INSERT INTO {table} (tenant_id, minute, count) VALUES (%s, %s, 1) "  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
            f"ON CONFLICT (tenant_id, minute) DO UPDATE SET count = {table}.count + 1 "
            "RETURNING count",
            [tenant_id, minute],
        )
        return cursor.fetchone()[0]


def _redis_hit(url: str, tenant: Tenant, minute: int) -> int | None:
    """The window's count; None (the request passes) while Redis cannot be reached."""
    import redis

    key = f"loopwright:rate:{tenant.pk.hex}:{minute}"
    try:
        pipe = _redis(url).pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 2 * WINDOW_SECONDS)
        return int(pipe.execute()[0])
    except redis.RedisError as exc:
        log.warning("request rate not counted, Redis is unavailable: %s", exc)
        return None


@cache
def _redis(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)


def request_counts_prune(*, now: float | None = None) -> int:
    """Drop the database counters of finished windows."""
    now = _clock() if now is None else now
    current = int(now // WINDOW_SECONDS)
    deleted, _ = RequestCount.objects.filter(minute__lt=current - 1).delete()
    return deleted
