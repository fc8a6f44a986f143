"""Waiting in the server's placement queue: a progress display while a create waits for a worker
(a tqdm bar when tqdm is installed, else a log line whenever its place changes), shown once the
wait has lasted ``LONG_WAIT_SECONDS``, and what the user's limit on that wait raises."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

from pydantic import ValidationError

from .types import QueueStatus

__all__ = ["LONG_WAIT_SECONDS", "QueueProgress", "describe"]

logger = logging.getLogger("loopwright")

LONG_WAIT_SECONDS = 3.0
"""A wait in the queue is shown once it has lasted this long (shorter ones pass silently)."""


def describe(status: QueueStatus) -> str:
    """A queue place in a few words: place in line, what it waits for, likely start."""
    words = f"{status.position} of {status.waiting} in line for {_capacity(status)}"
    if status.estimated_start_at is not None:
        words += f", likely to start around {status.estimated_start_at:%H:%M:%S} UTC"
    return words


def _capacity(status: QueueStatus) -> str:
    where = "" if status.network == "open network" else f" on {status.network}"
    if status.waits_for == "capacity":
        group = f" ({status.replicas} workers)" if status.replicas > 1 else ""
        return f"a slot of {status.base_model}{where}{group}"
    if status.waits_for == "network":
        return f"a worker of {status.base_model} that reaches {status.network}"
    return f"a worker of {status.base_model}"


class QueueProgress:
    """Follows one create's place in the queue from the pending answers of its futures.

    ``heard`` takes each pending answer (its ``try_again`` body); ``close`` ends the display.
    ``last`` is the most recent place heard (None: not queued when last heard from).
    """

    def __init__(
        self,
        what: str,
        *,
        show: bool = True,
        stream: TextIO | None = None,
        long_wait: float | None = None,
    ) -> None:
        self.what = what
        self.last: QueueStatus | None = None
        self._show = show
        self._stream = stream
        self._long_wait = LONG_WAIT_SECONDS if long_wait is None else long_wait
        self._since: float | None = None  # when it was first heard queued
        self._bar: Any = None
        self._told: tuple | None = None  # what the log line last said
        self._lock = threading.Lock()
        self._closed = False
        self._timer: threading.Timer | None = None

    @property
    def queued(self) -> bool:
        """Whether the last pending answer said it waits in the queue."""
        return self.last is not None

    def heard(self, pending: dict[str, Any]) -> None:
        raw = pending.get("queue")
        try:
            status = QueueStatus.model_validate(raw) if isinstance(raw, dict) else None
        except ValidationError:
            status = None
        with self._lock:
            if self._closed:
                return
            self.last = status
            if status is None:
                self._end_bar()
                return
            now = time.monotonic()
            if self._since is None:
                self._since = now
                if self._show and self._long_wait > 0:
                    # shown once the wait has lasted, even before the next answer comes
                    self._timer = threading.Timer(self._long_wait, self._lasted)
                    self._timer.daemon = True
                    self._timer.start()
            if self._show and now - self._since >= self._long_wait:
                self._display(status)

    def _lasted(self) -> None:
        with self._lock:
            if not self._closed and self.last is not None:
                self._display(self.last)

    def _display(self, status: QueueStatus) -> None:
        if self._bar is None:
            self._bar = _new_bar(self.what, status.position, self._stream)
        if self._bar is not None:
            total = max(self._bar.total or 0, status.position)
            self._bar.total = total
            self._bar.n = total - status.position
            self._bar.set_postfix_str(describe(status), refresh=False)
            self._bar.refresh()
            return
        shown = (status.position, status.waiting, status.waits_for, status.estimated_start_at)
        if shown != self._told:
            self._told = shown
            logger.warning("%s waits in the placement queue: %s", self.what, describe(status))

    def _end_bar(self) -> None:
        if self._bar is not None:
            self._bar.n = self._bar.total
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._end_bar()
            if self._timer is not None:
                self._timer.cancel()


def _new_bar(what: str, position: int, stream: TextIO | None) -> Any:
    """A tqdm bar of the places left to move up (None without tqdm)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(
        total=position,
        desc=f"{what}: queued",
        unit="place",
        file=stream or sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )
