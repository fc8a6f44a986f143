"""Wake long polls the moment an operation finishes, without polling the database.

On PostgreSQL a trigger on the operations table (migration 0006) sends
``NOTIFY loopwright_ops`` whenever an operation becomes done or failed, delivered at the commit
that finished it. The notice is a JSON object: the request id and, when it fits in a notice
(under 8,000 bytes), the operation's status, result, error and category, so the waiting request
answers without reading the row again. One listener thread per control-plane process wakes the
requests waiting for it (``controlplane.pg_listen``). Elsewhere (SQLite) waiters poll.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from django.conf import settings

from controlplane import pg_listen
from controlplane.training_sessions.models import Operation

log = logging.getLogger(__name__)
CHANNEL = "loopwright_ops"
_FIELDS = ["status", "result", "error", "error_category"]


def available() -> bool:
    return settings.NOTIFY_ON_COMPLETION and settings.DATABASES["default"]["ENGINE"].endswith(
        "postgresql"
    )


def parse_notice(payload: str) -> tuple[str, dict | None]:
    """The request id a notice names and, if it carries it, the finished operation's state."""
    if not payload.startswith("{"):
        return payload, None  # a bare request id
    note = json.loads(payload)
    state = None
    if note.get("status") in Operation.FINISHED:
        state = {
            "status": note["status"],
            "result": note.get("result"),
            "error": note.get("error") or "",
            "error_category": note.get("category") or "",
        }
    return note["id"], state


class Waiter:
    """One request waiting for an operation: woken by its notice, holding the state it carried.

    ``listening``: LISTEN was in place when it registered, so no notice sent after that is
    missed (one registered before the operation's insert commits needs no look at the row)."""

    def __init__(self, on_wake: Callable[[], None] | None = None) -> None:
        self.event = threading.Event()
        self.state: dict | None = None
        self.listening = False
        self._on_wake = on_wake  # also told (in the listener's thread), e.g. to fill a queue

    def wake(self, state: dict | None) -> None:
        if state is not None:
            self.state = state
        self.event.set()
        if self._on_wake is not None:
            self._on_wake()


class _Waiting:
    """The requests of this process waiting for operations, woken by the operations channel of
    the process's PostgreSQL listener (``controlplane.pg_listen``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[Waiter]] = defaultdict(list)

    def register(
        self, request_id: str, *, wait: float = 2.0, on_wake: Callable[[], None] | None = None
    ) -> Waiter:
        """A waiter for ``request_id``'s notice; ``wait``: how long to wait for LISTEN to be in
        place (without it, the waiter falls back to looks at the row)."""
        waiter = Waiter(on_wake)
        with self._lock:
            self._waiting[request_id].append(waiter)
        waiter.listening = pg_listen.listener.start(wait=wait)
        return waiter

    def unregister(self, request_id: str, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._waiting.get(request_id, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiting.pop(request_id, None)

    def deliver(self, payload: str) -> None:
        try:
            request_id, state = parse_notice(payload)
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed operation notice: %.200s", payload)
            return
        with self._lock:
            for waiter in self._waiting.get(request_id, ()):
                waiter.wake(state)


waiting = _Waiting()
pg_listen.listener.subscribe(CHANNEL, waiting.deliver)


def expect(request_id: str, on_wake: Callable[[], None] | None = None) -> Waiter | None:
    """Listen for an operation about to be inserted (None where there are no notices): its
    waiter hears every notice, so ``wait_finished`` need not look at the row first. Pass it to
    ``wait_finished``, or to ``forget`` if the operation never goes in. ``on_wake``: also told
    of each notice."""
    # (never held up: while LISTEN is not in place, the wait looks at the row instead)
    return waiting.register(request_id, wait=0, on_wake=on_wake) if available() else None


def forget(request_id: str, waiter: Waiter | None) -> None:
    if waiter is not None:
        waiting.unregister(request_id, waiter)


def wait_finished(op: Operation, deadline: float, waiter: Waiter | None = None) -> Operation:
    """``op`` once it has finished, or as it stands at ``deadline`` (monotonic).

    Woken by the operation's notice where there is one (with the finished state in it, the row
    is not read again); else it looks at the row, tightly at first, then backing off.
    ``waiter``: from ``expect``, registered before the operation was inserted.
    """
    if not available():
        return _wait_polling(op, deadline)
    expected = waiter is not None and waiter.listening
    if waiter is None:
        waiter = waiting.register(op.pk)
    try:
        if waiter.state is not None:  # its notice came already
            for name, value in waiter.state.items():
                setattr(op, name, value)
        elif not expected:
            # Look again now that we listen: a notice sent before registering is not missed.
            op.refresh_from_db(fields=_FIELDS)
        while op.status not in Operation.FINISHED:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            waiter.event.wait(min(remaining, 1.0))
            waiter.event.clear()
            if waiter.state is not None:
                for name, value in waiter.state.items():
                    setattr(op, name, value)
            else:  # woken without the state (too large for a notice), or a periodic look
                op.refresh_from_db(fields=_FIELDS)
    finally:
        waiting.unregister(op.pk, waiter)
    return op


def _wait_polling(op: Operation, deadline: float) -> Operation:
    started = time.monotonic()
    pause = 0.001
    while op.status not in Operation.FINISHED and time.monotonic() < deadline:
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        # Poll tightly while short operations usually finish, then back off.
        if time.monotonic() - started > 0.1:
            pause = min(pause * 1.5, 0.05)
        op.refresh_from_db(fields=_FIELDS)
    return op
