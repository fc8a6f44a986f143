"""APIFuture: the handle every operation returns at once, and the polling that completes it.

A future's work runs on the client's event loop thread; ``result()`` blocks the calling thread,
``await future`` (or ``result_async``) waits inside the caller's own event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, TypeVar

import httpx
from pydantic import ValidationError

from ._http import POLL_TIMEOUT, HTTPClient
from .errors import (
    APIResponseValidationError,
    LoopwrightError,
    ModelLostError,
    RequestFailedError,
)
from .types import UntypedAPIFuture

logger = logging.getLogger("loopwright")

__all__ = [
    "APIFuture",
    "CombinedAPIFuture",
    "OnWait",
    "Submitted",
    "await_future",
    "poll_future",
    "send_request",
]

T = TypeVar("T")

POLL_BACKOFF_START = 0.05
"""First pause after a pending answer that came back at once (a server that does not long-poll)."""
POLL_BACKOFF_MAX = 1.0
"""Longest such pause."""

_CLOSED = "the client was closed before this operation finished"


class APIFuture(Generic[T]):
    """The eventual result of an operation: ``result()``, ``await future``, ``done()``."""

    def __init__(
        self,
        future: concurrent.futures.Future[T],
        in_loop_thread: Callable[[], bool] | None = None,
    ) -> None:
        self._future = future
        self._in_loop_thread = in_loop_thread

    def result(self, timeout: float | None = None) -> T:
        """Block until the result is there; raises TimeoutError after ``timeout`` seconds."""
        if self._in_loop_thread is not None and self._in_loop_thread():
            raise RuntimeError("result() would deadlock on the client's event loop; use await")
        try:
            return self._future.result(timeout)
        except concurrent.futures.CancelledError:
            raise LoopwrightError(_CLOSED) from None

    def done(self) -> bool:
        """Whether the result (or an error) is there."""
        return self._future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Block until done; the error the operation failed with, or None."""
        try:
            return self._future.exception(timeout)
        except concurrent.futures.CancelledError:
            return LoopwrightError(_CLOSED)

    async def result_async(self, timeout: float | None = None) -> T:
        """Wait inside the caller's event loop; a timeout leaves the operation running."""
        wrapped = asyncio.wrap_future(self._future)
        try:
            return await asyncio.wait_for(asyncio.shield(wrapped), timeout)
        except asyncio.CancelledError:
            if self._future.cancelled():
                raise LoopwrightError(_CLOSED) from None
            raise

    def __await__(self) -> Generator[Any, None, T]:
        return self.result_async().__await__()


class CombinedAPIFuture(APIFuture[T]):
    """One future over several (e.g. the chunks of a forward_backward), merged by ``combine``.

    It fails as soon as any part fails, with that part's error.
    """

    def __init__(self, parts: Sequence[APIFuture[Any]], combine: Callable[[list[Any]], T]) -> None:
        out: concurrent.futures.Future[T] = concurrent.futures.Future()
        super().__init__(out, parts[0]._in_loop_thread if parts else None)
        self.parts = list(parts)
        lock = threading.Lock()
        remaining = [len(parts)]

        def settle(result: Callable[[], T] | None, error: BaseException | None) -> None:
            with lock:
                if out.done():
                    return
                try:
                    if error is not None:
                        out.set_exception(error)
                    elif result is not None:
                        out.set_result(result())
                except BaseException as exc:  # combine() failed
                    out.set_exception(exc)

        def on_done(part: concurrent.futures.Future[Any]) -> None:
            if part.cancelled():
                settle(None, LoopwrightError(_CLOSED))
                return
            if (error := part.exception()) is not None:
                settle(None, error)
                return
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                settle(lambda: combine([p._future.result() for p in self.parts]), None)

        if not parts:
            settle(lambda: combine([]), None)
        for part in parts:
            part._future.add_done_callback(on_done)


def _parse(parse: Callable[[Any], T], data: Any, what: str) -> T:
    try:
        return parse(data)
    except (ValidationError, TypeError, ValueError) as exc:
        raise APIResponseValidationError(f"unexpected answer for {what}: {exc}") from exc


INLINE_WAIT_SECONDS = 25
"""How long a submit asks the server to hold its answer open for the outcome (``Prefer: wait``)."""

_NDJSON = "application/x-ndjson"
_finishing: set[asyncio.Task[None]] = set()  # streamed responses being read to their end


class Submitted:
    """A sent operation: its request_id and, when the server streams it, the outcome to come on
    the same response (one request per operation instead of a submit and a retrieve_future)."""

    def __init__(
        self,
        request_id: str,
        response: Any = None,
        lines: Any = None,
        release: Callable[[], None] | None = None,
        queue: dict[str, Any] | None = None,
    ) -> None:
        self.request_id = request_id
        self.queue = queue  # its place in the placement queue, as the handle said
        self._response = response
        self._lines = lines
        self._release = release

    async def outcome(self) -> Any:
        """The streamed answer's data; None when there is none (not streamed, or the stream
        broke: the operation exists, so polling its future picks it up)."""
        if self._response is None:
            return None
        try:
            line = await anext(self._lines, None)
            data = json.loads(line) if line else None
        except (httpx.HTTPError, ValueError):
            logger.debug("the streamed answer of %s broke off; polling it", self.request_id)
            data = None
        except BaseException:  # cancelled (the client is closing), or worse: let go of it
            await self.close()
            raise
        if data is None:
            await self.close()
            return None
        # The rest (the end of the response) is read after the answer is handed over.
        task = asyncio.get_running_loop().create_task(self._finish())
        _finishing.add(task)
        task.add_done_callback(_finishing.discard)
        return data

    async def _finish(self) -> None:
        """Read the response to its end, so its connection goes back to the pool; let go of it."""
        try:
            async for _ in self._lines:
                pass
        except httpx.HTTPError:
            pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Let go of the streamed response (the operation goes on; its future can be polled)."""
        response, self._response = self._response, None
        if response is not None:
            try:
                await response.aclose()
            finally:
                if self._release is not None:
                    self._release()


async def send_request(http: HTTPClient, path: str, body: Any) -> Submitted:
    """POST an operation; returns the future the server answers with.

    While the client holds fewer than ``HTTPClient.max_inline_waits`` such answers open, it asks
    for the outcome on the same response (``Prefer: wait``); beyond that (a large fan-out of
    samples, say) submits come back at once and are polled, so none waits for a connection.
    """
    if not http.take_inline_wait():
        return await _send_plain(http, path, body)
    response = None
    handed_over = False  # the response, and the slot taken above, belong to a Submitted
    try:
        response = await http.astream(
            "POST",
            path,
            body=body,
            headers={"Prefer": f"wait={INLINE_WAIT_SECONDS}"},
            timeout=max(POLL_TIMEOUT, http.timeout),
            pool="ops",
        )
        if response.headers.get("content-type", "").split(";")[0].strip() != _NDJSON:
            await response.aread()  # a server that answers with the handle alone
            return _submitted(_handle(_json(response.content, path), path))
        lines = response.aiter_lines()
        try:
            first = await anext(lines, None)
        except httpx.TransportError:
            first = None
        if not first:
            # The handle never came: send it again the plain way, retried as any request is
            # (the server answers a retry with the same operation: seq_ids make it idempotent).
            return await _send_plain(http, path, body)
        handle = _handle(_json(first, path), path)
        sent = Submitted(
            handle.request_id,
            response,
            lines,
            http.release_inline_wait,
            handle.queue.model_dump(mode="json") if handle.queue else None,
        )
        handed_over = True
        return sent
    finally:
        if not handed_over:
            try:
                if response is not None:
                    await response.aclose()
            finally:
                http.release_inline_wait()


async def _send_plain(http: HTTPClient, path: str, body: Any) -> Submitted:
    response = await http.arequest("POST", path, body=body)
    return _submitted(_handle(_json(response.content, path), path))


def _submitted(handle: UntypedAPIFuture) -> Submitted:
    queue = handle.queue.model_dump(mode="json") if handle.queue else None
    return Submitted(handle.request_id, queue=queue)


def _json(text: str | bytes, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise APIResponseValidationError(f"unexpected answer for {path}: {exc}") from exc


def _handle(data: Any, path: str) -> UntypedAPIFuture:
    return _parse(UntypedAPIFuture.model_validate, data, path)


OnWait = Callable[[dict[str, Any]], None]
"""Told every pending answer of a future (its ``try_again`` body: queue_state, its reason and,
while its model or sampler waits for a worker, its place in the placement queue); the runtime
also tells it an empty body once the future has settled."""


async def await_future(
    http: HTTPClient, sent: Submitted, parse: Callable[[Any], T], on_wait: OnWait | None = None
) -> T:
    """The operation's result: from its streamed answer when it came with one, else polled."""
    if on_wait is not None and sent.queue is not None:  # queued from the start
        on_wait({"queue": sent.queue})
    data = await sent.outcome()
    if data is None or (isinstance(data, dict) and data.get("type") == "try_again"):
        if on_wait is not None and isinstance(data, dict):
            on_wait(data)
        return await poll_future(http, sent.request_id, parse, on_wait)
    settled = _settle(data, sent.request_id, parse)
    return settled


def _pending_body(response: Any) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def poll_future(
    http: HTTPClient, request_id: str, parse: Callable[[Any], T], on_wait: OnWait | None = None
) -> T:
    """Long-poll retrieve_future until the operation is done; raise RequestFailedError if it failed.

    Pending is an HTTP 408 or a 200 ``{"type": "try_again"}``; the server holds each poll up to
    ~30 s, and a pending answer that comes back at once is followed by a short, growing pause.
    ``on_wait`` hears each pending answer.
    """
    pause = POLL_BACKOFF_START
    told = None
    while True:
        started = time.monotonic()
        response = await http.arequest(
            "POST",
            "retrieve_future",
            body={"request_id": request_id},
            timeout=max(POLL_TIMEOUT, http.timeout),
            passthrough=(408,),
            pool="poll",
        )
        data: Any = None if response.status_code == 408 else response.json()
        if response.status_code == 408 or (
            isinstance(data, dict) and data.get("type") == "try_again"
        ):
            pending = _pending_body(response)
            reason = pending.get("queue_state_reason")
            if on_wait is not None:
                on_wait(pending)
            # why it is held, once (a place in the placement queue is on_wait's to show)
            if isinstance(reason, str) and reason != told and not pending.get("queue"):
                logger.warning("request %s is held: %s", request_id, reason)
                told = reason
            if time.monotonic() - started < 1.0:
                await asyncio.sleep(pause)
                pause = min(pause * 2, POLL_BACKOFF_MAX)
            continue
        return _settle(data, request_id, parse)


def _settle(data: Any, request_id: str, parse: Callable[[Any], T]) -> T:
    """A finished future's answer: its parsed result, or RequestFailedError if it failed."""
    if isinstance(data, dict) and "error" in data:
        category = data.get("category")
        category = category if category in ("user", "server") else "unknown"
        if data.get("code") == "model_lost":
            resume = data.get("resume_from")
            raise ModelLostError(
                str(data["error"]),
                category,
                request_id,
                resume if isinstance(resume, str) else None,
            )
        raise RequestFailedError(str(data["error"]), category, request_id)
    return _parse(parse, data, f"request {request_id}")
