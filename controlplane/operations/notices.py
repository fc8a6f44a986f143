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
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
    """One request waiting for ``request_id``'s operation: woken by its notice, holding the
    state it carried. Made, registered and unregistered by ``listening``.

    ``listening``: LISTEN was in place when it registered, so no notice sent after that is
    missed (one registered before the operation's insert commits needs no look at the row)."""

    def __init__(self, request_id: str, on_wake: Callable[[], None] | None = None) -> None:
        self.request_id = request_id
        self.event = threading.Event()
        self.state: dict | None = None
        self.listening = False
        self.kept = False
        self._on_wake = on_wake  # also told (in the listener's thread), e.g. to fill a queue

    def wake(self, state: dict | None) -> None:
        if state is not None:
            self.state = state
        self.event.set()
        if self._on_wake is not None:
            self._on_wake()

    def keep(self) -> Callable[[], None]:
        """Leave it registered past its ``listening`` block (which ends without an error), for
        a wait that runs later, e.g. a streamed response's: the caller takes on calling the
        ``release`` returned, once that wait is over or will never run."""
        self.kept = True
        return self.release

    def release(self) -> None:
        """Stop listening (again: a no-op)."""
        waiting.unregister(self.request_id, self)


class _Waiting:
    """The requests of this process waiting for operations, woken by the operations channel of
    the process's PostgreSQL listener (``controlplane.pg_listen``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[Waiter]] = defaultdict(list)

    def register(self, waiter: Waiter, *, wait: float) -> None:
        """Wake ``waiter`` at its request's notice; ``wait``: how long to wait for LISTEN to be
        in place (without it, the waiter falls back to looks at the row)."""
        with self._lock:
            self._waiting[waiter.request_id].append(waiter)
        waiter.listening = pg_listen.listener.start(wait=wait)

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


@contextmanager
def listening(
    request_id: str, *, on_wake: Callable[[], None] | None = None, wait: float = 0
) -> Iterator[Waiter | None]:
    """Listen for ``request_id``'s completion notice for the block's length (None where there
    are no notices): entered before the operation is inserted, its waiter hears every notice,
    so ``wait_finished`` need not look at the row first. Unregistered when the block ends,
    however it ends, unless ``Waiter.keep`` handed its release to a later wait. ``on_wake``:
    also told of each notice. ``wait``: how long to wait for LISTEN to be in place (by default
    never held up: while it is not, the wait looks at the row instead)."""
    if not available():
        yield None
        return
    waiter = Waiter(request_id, on_wake)
    try:
        waiting.register(waiter, wait=wait)
        yield waiter
    except BaseException:
        waiter.release()
        raise
    if not waiter.kept:
        waiter.release()


def wait_finished(op: Operation, deadline: float, waiter: Waiter | None = None) -> Operation:
    """``op`` once it has finished, or as it stands at ``deadline`` (monotonic).

    Woken by the operation's notice where there is one (with the finished state in it, the row
    is not read again); else it looks at the row, tightly at first, then backing off.
    ``waiter``: from ``listening``, entered before the operation was inserted (and released by
    its owner); without one, it listens for the wait's length.
    """
    if op.status in Operation.FINISHED:
        return op  # finished as read: no listening, no second look at the row
    if not available():
        return _wait_polling(op, deadline)
    if waiter is not None:
        return _wait_notified(op, deadline, waiter, expected=waiter.listening)
    with listening(op.pk, wait=2.0) as own:
        if own is None:
            return _wait_polling(op, deadline)
        return _wait_notified(op, deadline, own, expected=False)


def _wait_notified(op: Operation, deadline: float, waiter: Waiter, *, expected: bool) -> Operation:
    """``wait_finished`` heard through ``waiter``; ``expected``: it heard every notice since
    before the operation went in, so the row need not be read first."""
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
