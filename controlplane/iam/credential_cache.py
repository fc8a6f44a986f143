"""What an API key resolves to (its row, its principal and the principal's policies) and each
tenant's quota limits, kept in each control-plane process for a few seconds so that a busy
client's requests skip four lookups.

Only on PostgreSQL, and only while this process listens for IAM changes: any change to a key, a
membership, a user, a role, a tenant, an inline policy or a quota clears every process's cache. The
process that made the change clears its own at once (and again at commit); the others on the
``NOTIFY loopwright_iam`` sent in the changing transaction, delivered at its commit. A lookup
that started before a change never refills the cache after it (a generation counter), and
``AUTH_CACHE_SECONDS`` bounds how long any entry lives (0 turns the cache off).
"""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db import connection, transaction

from controlplane import pg_listen

CHANNEL = "loopwright_iam"


class CredentialCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, object, object]] = {}
        self._limits: dict[object, tuple[float, object]] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def get(self, digest: str):
        """(key, principal) for a key digest, if cached, fresh and the key not yet expired."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        deadline, key, principal = entry
        if time.monotonic() > deadline or _expired(key):
            with self._lock:
                self._entries.pop(digest, None)
            return None
        return key, principal

    def put(self, digest: str, generation: int, key, principal) -> None:
        """Remember a lookup that began at ``generation``, unless something changed since."""
        ttl = settings.AUTH_CACHE_SECONDS
        if ttl <= 0:
            return
        with self._lock:
            if generation == self._generation:
                self._entries[digest] = (time.monotonic() + ttl, key, principal)

    def limits_get(self, tenant_pk):
        entry = self._limits.get(tenant_pk)
        if entry is None or time.monotonic() > entry[0]:
            return None
        return entry[1]

    def limits_put(self, tenant_pk, generation: int, limits) -> None:
        ttl = settings.AUTH_CACHE_SECONDS
        if ttl <= 0:
            return
        with self._lock:
            if generation == self._generation:
                self._limits[tenant_pk] = (time.monotonic() + ttl, limits)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()
            self._limits.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _expired(key) -> bool:
    from django.utils import timezone

    return key.revoked_at is not None or (
        key.expires_at is not None and key.expires_at <= timezone.now()
    )


cache = CredentialCache()
# another process's change empties it; so does (re)connecting, or losing, the listener
pg_listen.listener.subscribe(CHANNEL, lambda _payload: cache.clear(), cache.clear)


def usable() -> bool:
    """Whether lookups may be served from the cache in this process now: on PostgreSQL, with
    the listener that hears other processes' changes in place."""
    if settings.AUTH_CACHE_SECONDS <= 0 or connection.vendor != "postgresql":
        return False
    return pg_listen.listener.ensure_listening()


def changed(**_kwargs) -> None:
    """An IAM-relevant row changed: forget everything here now and at commit; tell the other
    processes at commit."""
    cache.clear()
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify(%s, '')", [CHANNEL])
    transaction.on_commit(cache.clear)
