"""Rows that decide what a request may do (what an API key resolves to, a tenant's limits), kept
in each control-plane process for a few seconds so that a busy client's requests skip their
lookups.

Only on PostgreSQL, and only while this process listens for changes: any change to one of the
rows the caches hold clears every cache of every process. The process that made the change
clears its own at once (and again at commit); the others on the ``NOTIFY loopwright_iam`` sent
in the changing transaction, delivered at its commit. All caches share one generation: a lookup
that started before a change never refills a cache after it, and ``AUTH_CACHE_SECONDS`` bounds
how long any entry lives (0 turns the caches off).

The apps that own the rows connect ``changed`` to their models' saves and deletes; the
process's shared notice listener (``controlplane.pg_listen``) calls ``clear`` on each notice and
whenever it (re)connects or stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from django.conf import settings
from django.db import connection, transaction

from controlplane import pg_listen

CHANNEL = "loopwright_iam"

_lock = threading.Lock()
_generation = 0
_caches: list[ProcessCache] = []


class ProcessCache:
    """One kind of entry, each kept for ``AUTH_CACHE_SECONDS`` at most."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[float, object]] = {}
        with _lock:
            _caches.append(self)

    @property
    def generation(self) -> int:
        return _generation

    def get(self, key: Hashable):
        """The value cached for ``key``, if fresh; else None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        deadline, value = entry
        if time.monotonic() > deadline:
            self.forget(key)
            return None
        return value

    def put(self, key: Hashable, generation: int, value) -> None:
        """Remember a lookup that began at ``generation``, unless something changed since."""
        ttl = settings.AUTH_CACHE_SECONDS
        if ttl <= 0:
            return
        with _lock:
            if generation == _generation:
                self._entries[key] = (time.monotonic() + ttl, value)

    def forget(self, key: Hashable) -> None:
        with _lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every entry of every cache (they share one generation)."""
        clear()

    def __len__(self) -> int:
        return len(self._entries)


def clear() -> None:
    global _generation
    with _lock:
        _generation += 1
        for cache in _caches:
            cache._entries.clear()


def usable() -> bool:
    """Whether lookups may be served from the caches in this process now: on PostgreSQL, with
    the listener that hears other processes' changes in place."""
    if settings.AUTH_CACHE_SECONDS <= 0 or connection.vendor != "postgresql":
        return False
    return pg_listen.listener.ensure_listening()


def changed(**_kwargs) -> None:
    """A cached row changed: forget everything here now and at commit; tell the other
    processes at commit."""
    clear()
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify(%s, '')", [CHANNEL])
    transaction.on_commit(clear)


# another process's change empties every cache; so does (re)connecting, or losing, the listener
pg_listen.listener.subscribe(CHANNEL, lambda _payload: clear(), clear)
