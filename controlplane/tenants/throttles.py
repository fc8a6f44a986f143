"""Leaky buckets in the database, taken atomically *before* the work they guard: a bucket holds
at most ``limit`` drops and drains ``limit`` per ``window`` seconds. Taking a drop is one
statement (an upsert whose update is conditional), so parallel requests can never take more
than the limit; it works the same on SQLite and PostgreSQL, with no Redis."""

from __future__ import annotations

import hashlib
import math
import time

from django.db import connection, transaction

from .models import Throttle

_clock = time.time


def _key(kind: str, subject: str) -> str:
    """A fixed-length key (the subject, an email or an address, is not stored as such)."""
    return f"{kind}:{hashlib.sha256(subject.encode()).hexdigest()}"


# One statement takes a drop: insert the bucket, or update it only while the drained level plus
# this drop stays within the limit (no row returned: the bucket is full). PostgreSQL says
# GREATEST where SQLite says MAX.
_DRAINED = "GREATEST(tenants_throttle.level - (%(now)s - tenants_throttle.updated) * %(rate)s, 0)"
_TAKE = (
    "INSERT INTO tenants_throttle (bucket, level, updated, drained_at) "
    "VALUES (%(bucket)s, 1, %(now)s, %(now)s + 1 / %(rate)s) "
    "ON CONFLICT (bucket) DO UPDATE SET "
    "level = " + _DRAINED + " + 1, "
    "updated = %(now)s, "
    "drained_at = %(now)s + (" + _DRAINED + " + 1) / %(rate)s "
    "WHERE " + _DRAINED + " + 1 <= %(limit)s RETURNING level"
)
_GIVE_BACK = "UPDATE tenants_throttle SET level = GREATEST(level - 1, 0) WHERE bucket = %s"


def _sql(statement: str) -> str:
    return statement if connection.vendor == "postgresql" else statement.replace("GREATEST", "MAX")


def take(kind: str, subject: str, *, limit: int, window: float) -> int | None:
    """Take a drop from the bucket ``kind``/``subject``: None when taken, else the seconds until
    one can be (the bucket is full; nothing changed)."""
    now, rate = _clock(), limit / window
    params = {"bucket": _key(kind, subject), "now": now, "rate": rate, "limit": limit}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_sql(_TAKE), params)
        if cursor.fetchone() is not None:
            return None
    return _wait(params["bucket"], now=now, rate=rate, limit=limit)


def _wait(key: str, *, now: float, rate: float, limit: int) -> int:
    row = Throttle.objects.filter(bucket=key).values_list("level", "updated").first()
    if row is None:  # drained and pruned meanwhile
        return 1
    level = max(row[0] - (now - row[1]) * rate, 0)
    return max(1, math.ceil((level + 1 - limit) / rate))


def give_back(kind: str, subject: str) -> None:
    """Return a drop taken for work that turned out to be fine (a login that succeeded)."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(_GIVE_BACK), [_key(kind, subject)])


def clear(kind: str, subject: str) -> None:
    """Empty a bucket (a login that succeeded clears its account and address's failures)."""
    Throttle.objects.filter(bucket=_key(kind, subject)).delete()


def throttles_prune(*, now: float | None = None) -> int:
    """Drop the buckets that have drained."""
    deleted, _ = Throttle.objects.filter(drained_at__lt=_clock() if now is None else now).delete()
    return deleted
