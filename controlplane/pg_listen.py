"""One PostgreSQL ``LISTEN`` connection per process, shared by whoever hears notices there.

A module subscribes to its channel with what to do for each notice and what to do whenever the
listener is (re)connected or stops (a cache that can no longer hear of changes stops trusting
what it holds). A request can also listen on a channel of its own for a while (``listen`` /
``unlisten``); the listening thread is woken to take such a change at once. The listening
thread starts on first use and holds its own connection; should it fail, the next use starts
another. Knows nothing of what the channels carry.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Subscription:
    on_notice: Callable[[str], None]  # the notice's payload
    on_reset: Callable[[], None] | None = None  # LISTEN just took effect, or stopped


class Listener:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, Subscription] = {}
        self._unheard: list[str] = []  # subscribed while the thread runs: LISTEN still to come
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        # channels listened on for a while: what each notice goes to, and LISTEN/UNLISTEN to do
        self._passing: dict[str, Callable[[str], None]] = {}
        self._passing_listened: dict[str, threading.Event] = {}
        self._passing_changes: list[str] = []
        self._bell: tuple[socket.socket, socket.socket] | None = None  # wakes the thread

    def subscribe(
        self,
        channel: str,
        on_notice: Callable[[str], None],
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        """Hear ``channel`` (a plain identifier). Subscribed while the listener runs, it is
        not ready until LISTEN for the channel is in place too."""
        with self._lock:
            known = channel in self._channels
            self._channels[channel] = Subscription(on_notice, on_reset)
            if not known and self._thread is not None and self._thread.is_alive():
                self._unheard.append(channel)
                self._ready.clear()
                self._ring()

    def listen(self, channel: str, on_notice: Callable[[str], None]) -> threading.Event:
        """Hear ``channel`` (any name) until ``unlisten``; the event is set once LISTEN is in
        place (the listener is started if it is not running)."""
        listened = threading.Event()
        with self._lock:
            self._passing[channel] = on_notice
            self._passing_listened[channel] = listened
            self._passing_changes.append(channel)
            self._start()
        self._ring()
        return listened

    def unlisten(self, channel: str) -> None:
        with self._lock:
            self._passing.pop(channel, None)
            self._passing_listened.pop(channel, None)
            self._passing_changes.append(channel)
        self._ring()

    def _ring(self) -> None:
        bell = self._bell
        if bell is not None:  # full (rung many times) or closed (the thread ended): no matter
            with contextlib.suppress(OSError):
                bell[1].send(b"\0")

    def ready(self) -> bool:
        return self._ready.is_set()

    def start(self, *, wait: float = 0) -> bool:
        """Start the listener if it is not running; whether LISTEN is in place (waiting up to
        ``wait`` seconds for it)."""
        if self._ready.is_set():
            return True
        with self._lock:
            self._start()
        return self._ready.wait(wait) if wait else self._ready.is_set()

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
        self._ring()
        if thread is not None:
            thread.join(5.0)
        self._stopping.clear()

    def _start(self) -> bool:
        if self._thread is None or not self._thread.is_alive():
            self._ready.clear()
            self._unheard.clear()
            self._bell = socket.socketpair()
            for end in self._bell:
                end.setblocking(False)
            self._thread = threading.Thread(
                target=self._run, args=(self._bell,), name="pg-listener", daemon=True
            )
            self._thread.start()
            return True
        return False

    def _reset_all(self) -> None:
        for subscription in list(self._channels.values()):
            if subscription.on_reset is not None:
                subscription.on_reset()

    def _run(self, bell: tuple[socket.socket, socket.socket]) -> None:
        import psycopg

        try:
            with psycopg.connect(autocommit=True, **connect_params()) as conn:
                for channel in list(self._channels):
                    conn.execute(f"LISTEN {channel}")
                with self._lock:  # a reconnection listens again on every passing channel
                    self._passing_changes = list(self._passing)
                self._reset_all()  # what changed before LISTEN took effect
                self._ready.set()
                while not self._stopping.is_set():
                    self._listen_unheard(conn)
                    self._listen_passing(conn, bell[0])
                    for note in conn.notifies(timeout=0):  # what came meanwhile, without waiting
                        self._deliver(note.channel, note.payload)
                    # until the connection has something, a change is asked for, or a second
                    select.select([conn.fileno(), bell[0]], [], [], 1.0)
        except Exception:  # users fall back to looking for themselves; the next use restarts it
            log.exception("PostgreSQL listener stopped")
        finally:
            self._ready.clear()
            self._reset_all()  # no longer hearing changes
            for end in bell:
                end.close()

    def _deliver(self, channel: str, payload: str) -> None:
        subscription = self._channels.get(channel)
        if subscription is not None:
            subscription.on_notice(payload)
            return
        on_notice = self._passing.get(channel)
        if on_notice is not None:
            on_notice(payload)

    def _listen_passing(self, conn, bell: socket.socket) -> None:
        from psycopg import sql

        with contextlib.suppress(BlockingIOError):
            while bell.recv(4096):
                pass
        with self._lock:
            changes, self._passing_changes = self._passing_changes, []
        for channel in dict.fromkeys(changes):
            with self._lock:
                listened = self._passing_listened.get(channel)
            command = "LISTEN {}" if listened is not None else "UNLISTEN {}"
            conn.execute(sql.SQL(command).format(sql.Identifier(channel)))
            if listened is not None:
                listened.set()

    def _listen_unheard(self, conn) -> None:
        with self._lock:
            channels, self._unheard = self._unheard, []
        if not channels:
            return
        for channel in channels:
            conn.execute(f"LISTEN {channel}")
            reset = self._channels[channel].on_reset
            if reset is not None:
                reset()
        with self._lock:
            if not self._unheard:
                self._ready.set()


listener = Listener()
