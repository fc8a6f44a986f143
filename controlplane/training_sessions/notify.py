"""Wake long polls the moment an operation finishes, without polling the database; hear IAM
changes made by other processes (``controlplane.iam.credential_cache``).

On PostgreSQL the worker sends ``NOTIFY loopwright_ops, '<request id>'`` in the transaction that
completes the operation (delivered on commit); one listener thread per control-plane process
wakes the requests waiting for it. Elsewhere (SQLite) waiters fall back to polling.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)
CHANNEL = "loopwright_ops"


def available() -> bool:
    return settings.NOTIFY_ON_COMPLETION and settings.DATABASES["default"]["ENGINE"].endswith(
        "postgresql"
    )


def send(request_id: str) -> None:
    """Announce that ``request_id`` finished; call inside the completing transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify(%s, %s)", [CHANNEL, request_id])


def connect_params() -> dict:
    """psycopg connection arguments for the default database (a listener's own connection)."""
    db = settings.DATABASES["default"]
    params = {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
    }
    return {k: v for k, v in params.items() if v}


class _Listener:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[threading.Event]] = defaultdict(list)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()

    def register(self, request_id: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiting[request_id].append(event)
            self._start()
        self._ready.wait(2.0)  # LISTEN is in place (or the waiter falls back to periodic looks)
        return event

    def ensure_listening(self) -> bool:
        """Start the listener if it is not running; whether LISTEN is in place now."""
        if self._ready.is_set():
            return True
        with self._lock:
            started = self._start()
        return self._ready.wait(0.5 if started else 0)

    def stop(self) -> None:
        """Close the listening connection (before its database is dropped, in tests)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stopping.set()
        if thread is not None:
            thread.join(5.0)
        self._stopping.clear()

    def _start(self) -> bool:
        if self._thread is None or not self._thread.is_alive():
            self._ready.clear()
            self._thread = threading.Thread(target=self._run, name="op-listener", daemon=True)
            self._thread.start()
            return True
        return False

    def unregister(self, request_id: str, event: threading.Event) -> None:
        with self._lock:
            events = self._waiting.get(request_id, [])
            if event in events:
                events.remove(event)
            if not events:
                self._waiting.pop(request_id, None)

    def _run(self) -> None:
        import psycopg

        from controlplane.iam import credential_cache

        try:
            with psycopg.connect(autocommit=True, **connect_params()) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                conn.execute(f"LISTEN {credential_cache.CHANNEL}")
                credential_cache.cache.clear()  # changes made before LISTEN took effect
                self._ready.set()
                while not self._stopping.is_set():
                    for note in conn.notifies(timeout=1.0):
                        if note.channel == credential_cache.CHANNEL:
                            credential_cache.cache.clear()
                            continue
                        with self._lock:
                            for event in self._waiting.get(note.payload, ()):
                                event.set()
        except Exception:  # waiters fall back to polling; the next register starts a new thread
            log.exception("operation listener stopped")
        finally:
            self._ready.clear()
            credential_cache.cache.clear()  # no longer hearing changes: stop trusting the cache


listener = _Listener()
