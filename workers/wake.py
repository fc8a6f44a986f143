"""Wake-ups over PostgreSQL: a thread holds a ``LISTEN loopwright_wake`` connection and a second
thread drains the worker whenever a notice names its queue.

Notices that arrive while a drain runs are coalesced into one more pass, so a burst of submits
costs one extra look, not one per submit. If the listening connection drops, the thread
reconnects after a pause and drains once (work submitted meanwhile is not missed); the
heartbeat's look for waiting work is the last line behind both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections

from controlplane.dispatch import WAKE_CHANNEL
from controlplane.pg_listen import connect_params

log = logging.getLogger("loopwright.worker")
RECONNECT_SECONDS = 1.0


class WakeListener:
    def __init__(self, queue: str, drain: Callable[[], int], stop: threading.Event) -> None:
        self.queue = queue
        self._drain = drain
        self._stop = stop
        self._wanted = threading.Event()
        self.listening = threading.Event()  # set while LISTEN is in place

    def start(self) -> WakeListener:
        threading.Thread(target=self._listen, name="worker-wake-listen", daemon=True).start()
        threading.Thread(target=self._drainer, name="worker-wake-drain", daemon=True).start()
        return self

    def poke(self) -> None:
        """Ask for a drain pass (the heartbeat found work left waiting)."""
        self._wanted.set()

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(autocommit=True, **connect_params()) as conn:
                    conn.execute(f"LISTEN {WAKE_CHANNEL}")
                    self.listening.set()
                    self._wanted.set()  # anything submitted before LISTEN took effect
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if note.payload == self.queue:
                                self._wanted.set()
            except Exception:
                log.exception("wake listener lost its connection; reconnecting")
            finally:
                self.listening.clear()
            self._stop.wait(RECONNECT_SECONDS)

    def _drainer(self) -> None:
        while not self._stop.is_set():
            if not self._wanted.wait(1.0):
                continue
            self._wanted.clear()  # a notice during the drain asks for one more pass
            try:
                self._drain()
            except Exception:
                log.exception("drain after a wake-up failed")
            finally:
                close_old_connections()
