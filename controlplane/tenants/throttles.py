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


def _greatest() -> str:
    return "GREATEST" if connection.vendor == "postgresql" else "MAX"


def take(kind: str, subject: str, *, limit: int, window: float) -> int | None:
    """Take a drop from the bucket ``kind``/``subject``: None when taken, else the seconds until
    one can be (the bucket is full; nothing changed)."""
    now, rate = _clock(), limit / window
    table = connection.ops.quote_name(Throttle._meta.db_table)
    level = f"{_greatest()}({table}.level - (%(now)s - {table}.updated) * %(rate)s, 0) + 1"
    params = {"bucket": _key(kind, subject), "now": now, "rate": rate, "limit": limit}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (bucket, level, updated, drained_at) "
            "VALUES (%(bucket)s, 1, %(now)s, %(now)s + 1 / %(rate)s) "
            f"ON CONFLICT (bucket) DO UPDATE SET level = {level}, updated = %(now)s, "
            f"drained_at = %(now)s + ({level}) / %(rate)s "
            f"WHERE {level} <= %(limit)s RETURNING level",
            params,
        )
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
    table = connection.ops.quote_name(Throttle._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET level = {_greatest()}(level - 1, 0) WHERE bucket = %s",
            [_key(kind, subject)],
        )


def clear(kind: str, subject: str) -> None:
    """Empty a bucket (a login that succeeded clears its account and address's failures)."""
    Throttle.objects.filter(bucket=_key(kind, subject)).delete()


def throttles_prune(*, now: float | None = None) -> int:
    """Drop the buckets that have drained."""
    deleted, _ = Throttle.objects.filter(drained_at__lt=_clock() if now is None else now).delete()
    return deleted
