"""Wake long polls the moment an operation finishes, without polling the database.

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


class _Listener:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[threading.Event]] = defaultdict(list)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def register(self, request_id: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiting[request_id].append(event)
            if self._thread is None or not self._thread.is_alive():
                self._ready.clear()
                self._thread = threading.Thread(target=self._run, name="op-listener", daemon=True)
                self._thread.start()
        self._ready.wait(2.0)  # LISTEN is in place (or the waiter falls back to periodic looks)
        return event

    def unregister(self, request_id: str, event: threading.Event) -> None:
        with self._lock:
            events = self._waiting.get(request_id, [])
            if event in events:
                events.remove(event)
            if not events:
                self._waiting.pop(request_id, None)

    def _run(self) -> None:
        import psycopg

        db = settings.DATABASES["default"]
        params = {
            "dbname": db["NAME"],
            "user": db.get("USER") or None,
            "password": db.get("PASSWORD") or None,
            "host": db.get("HOST") or None,
            "port": db.get("PORT") or None,
        }
        try:
            with psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                self._ready.set()
                while True:
                    for note in conn.notifies(timeout=5.0):
                        with self._lock:
                            for event in self._waiting.get(note.payload, ()):
                                event.set()
        except Exception:  # waiters fall back to polling; the next register starts a new thread
            log.exception("operation listener stopped")


listener = _Listener()
