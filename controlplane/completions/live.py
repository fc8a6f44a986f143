"""A request answered as the worker draws its tokens, as a face-neutral series of events that
each face writes in its own stream format.

Before its operations are submitted, the request listens on each one's token channel
(``controlplane.operations.token_notices``) and for its completion notice, so nothing sent
after the insert is missed; the events then carry each choice's text as it becomes final
(``live_text``), the choices interleaved by index. Once every operation has finished, the
completed rows say the rest: text and tokens not sent yet (a missed notice, a dropped
connection), each finish, and the usage (metered once from those rows, as for any request).
Where workers send no tokens (SQLite), the finished answer is sent as the same events.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings

from controlplane import pg_listen
from controlplane.errors import DomainError
from controlplane.operations import notices, token_notices
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, new_id

from . import services
from .errors import Timeout
from .live_text import ChoiceText
from .rendering import Choice, Piece

log = logging.getLogger(__name__)
LISTEN_WAIT_SECONDS = 2.0  # for LISTEN to be in place before the submit
LOOK_SECONDS = 1.0  # a look at the rows when no notice came (a notice may have been missed)
_FINISHED = object()  # an operation's completion notice
_FIELDS = ["status", "result", "error", "error_category"]


# -- the events, in the order a stream sends them -------------------------------------------
@dataclass(frozen=True)
class Started:
    """The answer's id and time: first, once the operations exist."""

    id: str
    created: int


@dataclass(frozen=True)
class Opened:
    """A choice begins (one per choice, before its text)."""

    index: int


@dataclass(frozen=True)
class Text:
    """More of a choice's text, and the tokens whose text it completes."""

    index: int
    text: str
    pieces: list[Piece]


@dataclass(frozen=True)
class Finished:
    """A choice is whole: its finish reason and stop sequence."""

    index: int
    choice: Choice


@dataclass(frozen=True)
class Ended:
    """Every choice is whole: the finished answer (its usage)."""

    done: services.Completed


@dataclass(frozen=True)
class Failed:
    """The request failed after the stream began (the worker failed it, or the wait ran out):
    the stream's last event."""

    error: DomainError


Event = Started | Opened | Text | Finished | Ended | Failed | None  # None: nothing new yet


def replayed(done: services.Completed) -> Iterator[Event]:
    """A finished answer as a stream's events: each choice's tokens as they were drawn."""
    yield Started(done.id, done.created)
    for i, choice in enumerate(done.choices):
        yield Opened(i)
        for piece in choice.pieces:
            yield Text(i, piece.delta, [piece])
        yield Finished(i, choice)
    yield Ended(done)


# -- listening --------------------------------------------------------------------------------
class _Heard:
    """What the request's listeners hear, token and completion notices in one queue, read by
    the stream's generator."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self._channels: list[str] = []
        self._waiters = contextlib.ExitStack()  # each request's completion listened for

    def listen(self, request_id: str) -> threading.Event:
        """Hear ``request_id``'s tokens and completion; set once its tokens are listened for."""
        name = token_notices.channel(request_id)
        self._channels.append(name)
        listened = pg_listen.listener.listen(
            name, lambda payload: self.queue.put((request_id, payload))
        )
        self._waiters.enter_context(
            notices.listening(request_id, on_wake=lambda: self.queue.put((request_id, _FINISHED)))
        )
        return listened

    def close(self) -> None:
        for name in self._channels:
            pg_listen.listener.unlisten(name)
        self._waiters.close()
        self._channels = []


def stream(
    *, tenant: Tenant, prepared: services.Prepared, idempotency_key: str | None
) -> Iterator[Event]:
    """Submit the request and return its events as they come. A refusal raises here, before
    anything is sent; a failure later is the last event (``Failed``)."""
    if not token_notices.available():
        done = services.prepared_complete(
            tenant=tenant, prepared=prepared, idempotency_key=idempotency_key
        )
        return replayed(done)
    heard = _Heard()
    try:
        ids = [new_id("req") for _ in prepared.payloads]
        listened = [heard.listen(request_id) for request_id in ids]
        limit = time.monotonic() + LISTEN_WAIT_SECONDS
        for event in listened:  # without it in time, the rows say what was missed
            event.wait(max(0.0, limit - time.monotonic()))
        ops = services.prepared_submit(
            tenant=tenant, prepared=prepared, idempotency_key=idempotency_key, request_ids=ids
        )
        for op in ops:
            if op.pk not in ids:  # a retry, answered with the operations its key made first
                heard.listen(op.pk)
    except BaseException:
        heard.close()
        raise
    return _live(heard, prepared, ops)


def _live(heard: _Heard, prepared: services.Prepared, ops: list[Operation]) -> Iterator[Event]:
    try:
        yield Started(services.completion_id(prepared, ops), int(ops[0].created_at.timestamp()))
        n = int(prepared.payloads[0].get("num_samples", 1))
        first = {op.pk: k * n for k, op in enumerate(ops)}  # each operation's first choice
        texts = [ChoiceText(prepared.tokenizer, prepared.stops) for _ in range(len(ops) * n)]
        for i in range(len(texts)):
            yield Opened(i)
        yield from _while_running(heard, ops, first, n, texts)
        done = services.completed(prepared, ops)
        for i, choice in enumerate(done.choices):
            rest = texts[i].finish(choice)
            if rest.text or rest.pieces:
                yield Text(i, rest.text, rest.pieces)
            yield Finished(i, choice)
        yield Ended(done)
    except DomainError as exc:
        yield Failed(exc)
    finally:  # also when the client went away: the operations run on, metered as any
        heard.close()


def _while_running(
    heard: _Heard,
    ops: list[Operation],
    first: dict[str, int],
    n: int,
    texts: list[ChoiceText],
) -> Iterator[Event]:
    """The choices' text as their tokens are heard, until every operation has finished; None
    when nothing was heard for ``STREAM_KEEPALIVE_SECONDS`` (the face sends a keep-alive)."""
    running = {op.pk: op for op in ops if op.status not in Operation.FINISHED}
    deadline = time.monotonic() + settings.OPENAI_WAIT_SECONDS
    keepalive = settings.STREAM_KEEPALIVE_SECONDS
    sent_at = time.monotonic()
    while running:
        now = time.monotonic()
        if now >= deadline:
            raise Timeout(
                f"the request did not finish within {settings.OPENAI_WAIT_SECONDS:g} s "
                f"(request {next(iter(running))} still runs and will be metered)"
            )
        try:
            request_id, payload = heard.queue.get(timeout=min(LOOK_SECONDS, deadline - now))
        except queue.Empty:
            for op in list(running.values()):
                _look(op, running)
            if time.monotonic() - sent_at >= keepalive:
                sent_at = time.monotonic()
                yield None
            continue
        if request_id not in running:
            continue
        if payload is _FINISHED:
            _look(running[request_id], running)
            continue
        try:
            entries = token_notices.parse(payload)
        except (ValueError, TypeError):
            log.warning("ignored a malformed token notice: %.200s", payload)
            continue
        touched: dict[int, None] = {}
        for sample, position, token, logprob, top in entries:
            if 0 <= sample < n:
                i = first[request_id] + sample
                texts[i].add(position, token, logprob, top)
                touched[i] = None
        for i in touched:
            update = texts[i].update()
            if update is not None:
                if update.text:
                    sent_at = time.monotonic()
                yield Text(i, update.text, update.pieces)


def _look(op: Operation, running: dict[str, Operation]) -> None:
    op.refresh_from_db(fields=_FIELDS)
    if op.status in Operation.FINISHED:
        running.pop(op.pk, None)
