"""Per-model request order: seq_ids are taken when an operation is called, in call order.

Each call also gets a place in the send order, so a model's requests reach the server in that order.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass

__all__ = ["SeqOrder", "Ticket"]


@dataclass(frozen=True)
class Ticket:
    """One call's seq_ids and its place in the send order."""

    seq_ids: list[int]
    """The seq_ids of its requests (one per chunk; none for requests without a seq_id)."""

    after: concurrent.futures.Future[None] | None
    """Set once the previous call's requests are sent (or failed to send)."""

    sent: concurrent.futures.Future[None]
    """To set once this call's requests are sent (or failed to send)."""

    def done_sending(self) -> None:
        """Let the next call send (also when this one failed or never sends)."""
        if not self.sent.done():
            self.sent.set_result(None)


class SeqOrder:
    """A model's seq_id counter (from 1) and the chain of its calls' sends."""

    def __init__(self, start: int = 1) -> None:
        self._lock = threading.Lock()
        self._next = start
        self._last_sent: concurrent.futures.Future[None] | None = None

    def reserve(self, count: int) -> Ticket:
        """Take the next ``count`` seq_ids and the next place in the send order."""
        with self._lock:
            seq_ids = list(range(self._next, self._next + count))
            self._next += count
            sent: concurrent.futures.Future[None] = concurrent.futures.Future()
            after, self._last_sent = self._last_sent, sent
        return Ticket(seq_ids, after, sent)
