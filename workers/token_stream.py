"""Publishes the tokens of streaming sample operations while the engine draws them.

The engine's thread only hands each decoding step's tokens to a queue (``sink``). A sender
thread, with a PostgreSQL connection of its own, gathers them for ``STREAM_FLUSH_SECONDS`` (or
until the batch ends) and sends them per operation as ``NOTIFY`` on the operation's channel
(``controlplane.operations.token_notices``): decoding never waits for the database. If the
connection fails, what it held is dropped and the next send reconnects: the streaming view
fills any gap from the completed operation.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence

from django.conf import settings

from controlplane import worker_port as port
from controlplane.pg_listen import connect_params

from .engine.sampler import SampledToken, TokenSink

log = logging.getLogger("loopwright.worker")
_SEND_NOW = None  # the end of a batch: send what is held without waiting
_STOP = "stop"  # send what is held, close the connection, and end the thread


class TokenPublisher:
    def __init__(self, flush_seconds: float | None = None) -> None:
        self.flush_seconds = flush_seconds
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._conn = None
        self.sent = 0  # notices sent (for tests and metrics)

    def sink(self, request_ids: Sequence[str], payloads: Sequence[dict]) -> TokenSink | None:
        """What to tell the engine for a batch of operations (``job``: the index among them);
        None when none of them streams."""
        channels = {
            i: port.token_channel(request_id)
            for i, (request_id, payload) in enumerate(zip(request_ids, payloads, strict=True))
            if port.wants_token_stream(payload)
        }
        if not channels or not port.token_notices_available():
            return None
        self._ensure_thread()

        def on_tokens(tokens: Sequence[SampledToken]) -> None:
            mine = [(channels[t.job], t) for t in tokens if t.job in channels]
            if mine:
                self._queue.put(mine)

        return on_tokens

    def batch_done(self) -> None:
        """Send what the batch drew without waiting for the next flush."""
        self._queue.put(_SEND_NOW)

    def close(self) -> None:
        """Send what is held, then close the connection (a later sink starts again)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(10)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="worker-token-stream", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        flush = self.flush_seconds
        if flush is None:
            flush = settings.STREAM_FLUSH_SECONDS
        while True:
            held: dict[str, list[port.TokenEntry]] = {}
            item = self._queue.get()
            deadline = time.monotonic() + flush
            while item is not _SEND_NOW and item is not _STOP:
                for name, t in item:
                    held.setdefault(name, []).append(
                        (t.sample, t.position, t.token, t.logprob, t.top)
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
            if held:
                self._send(held)
            if item is _STOP:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                return

    def _send(self, held: dict[str, list[port.TokenEntry]]) -> None:
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(autocommit=True, **connect_params())
            for name, entries in held.items():
                for payload in port.token_notices_of(entries):
                    self._conn.execute("SELECT pg_notify(%s, %s)", [name, payload])
                    self.sent += 1
        except Exception:
            log.exception("sending streamed tokens failed; their requests get them at the end")
            if self._conn is not None:
                self._conn.close()
            self._conn = None


publisher = TokenPublisher()
