"""The Django (WSGI) app behind uvicorn: a request's whole body is read on the event loop first
(spooled to a file past 1 MiB, refused with 413 past the body limit), so a thread is taken only
by a request that has fully arrived; the app then runs in a bounded thread pool, its response
streams back chunk by chunk as the app yields them (SSE, NDJSON, long polls), and a client that
has gone, or reads nothing for the deadline, stops the app's iteration (``close()`` runs). A
response that is not streamed is sent whole once the thread returns: no hand-off between the
thread and the loop beyond the thread's own start and return."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from a2wsgi.wsgi import build_environ

log = logging.getLogger("loopwright.serving")
SPOOL_BYTES = 1024 * 1024


class ClientGone(OSError):
    """The client closed the connection, or read nothing of the response for the deadline."""


class WsgiBridge:
    def __init__(self, app, *, threads: int, max_body: int, write_timeout: float) -> None:
        self.app = app
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="http")
        self.max_body = max_body
        self.write_timeout = write_timeout

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # no websockets; lifespan is off
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        environ = build_environ(scope, body)
        environ["CONTENT_LENGTH"] = str(body.tell())  # a chunked body has a length now
        body.seek(0)
        loop = asyncio.get_running_loop()
        gone = asyncio.Event()
        watcher = loop.create_task(_watch(receive, gone))

        def emit(messages: list[dict]) -> None:  # from the app's thread
            if gone.is_set():
                raise ClientGone("the client went away")
            sent = asyncio.run_coroutine_threadsafe(self._send_all(send, messages, gone), loop)
            sent.result()

        context = contextvars.copy_context()
        try:
            rest = await loop.run_in_executor(
                self.executor, context.run, _respond, self.app, environ, emit
            )
            if rest and not gone.is_set():
                try:
                    await self._send_all(send, rest, gone)
                except ClientGone as left:
                    log.info("stopped a response: %s", left)
        finally:
            watcher.cancel()
            body.close()

    async def _send_all(self, send, messages: list[dict], gone: asyncio.Event) -> None:
        for message in messages:
            await self._send(send, message, gone)

    async def _send(self, send, message: dict, gone: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(send(message), self.write_timeout)
        except TimeoutError:
            gone.set()
            raise ClientGone(
                f"the client read nothing for {self.write_timeout:g} seconds"
            ) from None

    async def _read_body(self, scope, receive, send):
        """The whole body in a file at its end, or None once answered (413) or gone."""
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await _too_large(send, declared, self.max_body)
            return None
        body = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (closed by the caller)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                body.close()
                return None
            body.write(message.get("body", b""))
            if body.tell() > self.max_body:
                body.close()
                await _too_large(send, None, self.max_body)
                return None
            if not message.get("more_body", False):
                return body


async def _watch(receive, gone: asyncio.Event) -> None:
    """Wait for the client to go (uvicorn also says so once the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(send, length: int | None, limit: int) -> None:
    size = f"of {length} bytes " if length is not None else ""
    detail = f"request body {size}exceeds the limit of {limit} bytes"
    payload = json.dumps({"detail": detail, "code": "payload_too_large", "field": None}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),  # the rest of the body is never read
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _respond(app, environ: dict, emit: Callable[[list[dict]], None]) -> list[dict]:
    """Run the WSGI app (PEP 3333) in this thread. What the app yields while it runs goes out
    as it comes (headers with the first chunk, in one hand-off to the event loop); what is
    left once it has returned, the thread hands back for the loop to send: the whole of a
    response that is not streamed (one hand-off for all of it, the thread's own return), the
    end of one that is."""
    started: dict[str, Any] = {}

    def start_response(status: str, headers, exc_info=None):
        if exc_info is not None and started.get("sent"):
            raise exc_info[1].with_traceback(exc_info[2])
        started.update(
            status=int(status.split(" ", 1)[0]),
            headers=[(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        )
        return lambda chunk: emit(_messages(chunk, more=True)) if chunk else None

    def _messages(chunk: bytes, *, more: bool) -> list[dict]:
        out = []
        if not started.get("sent"):
            started["sent"] = True
            out.append({"type": "http.response.start", "status": started["status"],
                        "headers": started["headers"]})  # fmt: skip
        if chunk or not more:
            out.append({"type": "http.response.body", "body": chunk, "more_body": more})
        return out

    iterable = app(environ, start_response)
    try:
        if getattr(iterable, "streaming", None) is False:  # Django's HttpResponse: all here
            return _messages(b"".join(iterable), more=False)
        for chunk in iterable:
            if chunk:
                emit(_messages(chunk, more=True))
        return _messages(b"", more=False)
    except ClientGone as gone:
        log.info("stopped a response: %s", gone)
        return []
    finally:
        close = getattr(iterable, "close", None)
        if close is not None:
            close()
