"""The one HTTP seam: base URL and API key resolution, timeouts, and retries with backoff.

Sync calls use ``httpx.Client``; the background event loop uses ``httpx.AsyncClient``.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import httpx

from .errors import APIConnectionError, APITimeoutError, LoopwrightError, status_error

__all__ = ["DEFAULT_BASE_URL", "HTTPClient", "RetryPolicy"]

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
_RETRY_STATUSES = frozenset({408, 429})
_RETRY_EXCEPTIONS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
DOWNLOAD_CHUNK = 1 << 20
# Retry jitter draws from a generator of its own: a retry in a background thread never moves
# the global ``random`` stream a user's seeded loop (or a hypothesis strategy) relies on.
_JITTER = random.Random()  # noqa: S311 — retry jitter, not a secret
POLL_TIMEOUT = 45.0
"""Read timeout of one retrieve_future long poll (the server holds it up to ~30 s)."""


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry a request that got no answer, 408, 429 or 5xx."""

    max_retry_seconds: float = 300.0
    """Stop retrying once this much time has passed since the first attempt."""

    initial_delay: float = 0.5
    """Delay before the first retry; it doubles on every further retry."""

    max_delay: float = 16.0
    """Longest delay between two attempts (Retry-After is capped by the time left)."""

    refused_max_delay: float = 2.0
    """Longest delay after a refused connection: nothing listens (the server is starting
    again), and such an attempt costs it nothing, so the client is back within this much of the
    server's return instead of up to ``max_delay`` after it."""

    jitter: float = 0.25
    """Each delay is randomly scaled by up to ±jitter, so clients do not retry in lockstep."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        base = min(self.initial_delay * 2 ** min(attempt, 30), self.max_delay)
        return max(0.0, base * (1 + self.jitter * (2 * _JITTER.random() - 1)))


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (a number or an HTTP date), if present."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Attempts:
    """Retry bookkeeping of one logical request: decides whether and how long to wait."""

    def __init__(self, policy: RetryPolicy, enabled: bool) -> None:
        self._policy = policy
        self._enabled = enabled
        self._start = time.monotonic()
        self._count = 0

    def _next(self, minimum: float | None = None, maximum: float | None = None) -> float | None:
        left = self._policy.max_retry_seconds - (time.monotonic() - self._start)
        delay = self._policy.delay(self._count)
        if maximum is not None:
            delay = min(delay, maximum)
        if minimum is not None:
            delay = max(delay, minimum)
        if not self._enabled or delay > left:
            return None
        self._count += 1
        return delay

    def after_response(
        self, response: httpx.Response, passthrough: tuple[int, ...]
    ) -> float | None:
        """None when the response is final; else the delay before retrying."""
        status = response.status_code
        if status < 400 or status in passthrough:
            return None
        if status in _RETRY_STATUSES or status >= 500:
            return self._next(_retry_after(response) if status in (429, 503) else None)
        return None

    def after_error(self, exc: Exception) -> float | None:
        """None when the error is final; else the delay before retrying."""
        if isinstance(exc, httpx.ConnectError):  # refused: nothing listens there yet
            return self._next(maximum=self._policy.refused_max_delay)
        return self._next() if isinstance(exc, _RETRY_EXCEPTIONS) else None


def _finish(response: httpx.Response, passthrough: tuple[int, ...]) -> httpx.Response:
    if response.status_code >= 400 and response.status_code not in passthrough:
        raise status_error(response)
    return response


def _stream_into(response: httpx.Response, sink: BinaryIO) -> httpx.Headers:
    """Write a final answer's body into ``sink`` (from its start), or raise its error."""
    if response.status_code >= 400:
        response.read()
        raise status_error(response)
    sink.seek(0)
    sink.truncate()
    for chunk in response.iter_bytes(DOWNLOAD_CHUNK):
        sink.write(chunk)
    sink.flush()
    return response.headers


def _connection_error(exc: Exception, method: str, path: str) -> APIConnectionError:
    cls = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
    return cls(f"{method} {path}: {type(exc).__name__}: {exc}")


def resolve_api_key(api_key: str | None) -> str:
    """The API key from the argument or LOOPWRIGHT_API_KEY; a clear error when neither is set."""
    key = api_key or os.environ.get("LOOPWRIGHT_API_KEY")
    if not key:
        raise LoopwrightError(
            "No API key: pass api_key=... or set LOOPWRIGHT_API_KEY (keys start with 'tml-')."
        )
    return key


def resolve_base_url(base_url: str | None) -> str:
    """The server root from the argument, LOOPWRIGHT_BASE_URL, or the local default."""
    root = base_url or os.environ.get("LOOPWRIGHT_BASE_URL") or DEFAULT_BASE_URL
    return root.rstrip("/")


@dataclass(frozen=True)
class RawBody:
    """A request body sent as these bytes with these headers (e.g. a protobuf
    forward_backward), instead of JSON."""

    content: bytes
    headers: dict[str, str]


class HTTPClient:
    """JSON requests to ``{base_url}/api/v1/`` with the API key, timeouts and retries.

    The async side keeps a pool per kind of request ("api", "ops" for submits that stream their
    outcome, "poll" for long polls), so waiting requests never hold up new operations. Its clients are
    created on first use, inside the event loop that uses them.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        max_connections: int = 256,
        max_inline_waits: int = 32,
        user_agent: str = "loopwright",
    ) -> None:
        self.base_url = resolve_base_url(base_url)
        self._api_url = f"{self.base_url}/api/v1/"
        self._headers = {
            "X-API-Key": resolve_api_key(api_key),
            "User-Agent": user_agent,
            "Accept": "application/json",
        }
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._transport = transport
        self._max_connections = max_connections
        sync_transport = transport if isinstance(transport, httpx.BaseTransport) else None
        self._client = httpx.Client(
            base_url=self._api_url,
            headers=self._headers,
            timeout=httpx.Timeout(timeout),
            transport=sync_transport,
        )
        self._aclients: dict[str, httpx.AsyncClient] = {}
        self._inline_waits_left = max_inline_waits
        self._closed = False

    def take_inline_wait(self) -> bool:
        """Reserve one of the responses this client may hold open for an operation's outcome
        (called on the event loop thread only); False when all are taken."""
        if self._inline_waits_left <= 0:
            return False
        self._inline_waits_left -= 1
        return True

    def release_inline_wait(self) -> None:
        """Give back what ``take_inline_wait`` reserved."""
        self._inline_waits_left += 1

    def _aclient(self, pool: str) -> httpx.AsyncClient:
        client = self._aclients.get(pool)
        if client is None:
            transport = self._transport
            limits = httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=min(self._max_connections, 64),
            )
            client = httpx.AsyncClient(
                base_url=self._api_url,
                headers=self._headers,
                # pool=None: a request waits for a free connection instead of failing
                timeout=httpx.Timeout(self.timeout, pool=None),
                limits=limits,
                transport=transport if isinstance(transport, httpx.AsyncBaseTransport) else None,
            )
            self._aclients[pool] = client
        return client

    @staticmethod
    def _encode(body: Any) -> bytes | None:
        # Encoded once, so every retry carries byte-identical content (idempotent by seq_id).
        if isinstance(body, RawBody):
            return body.content
        return None if body is None else json.dumps(body).encode()

    @staticmethod
    def _content_headers(body: Any, content: bytes | None) -> dict[str, str]:
        if isinstance(body, RawBody):
            return dict(body.headers)
        return {"Content-Type": "application/json"} if content is not None else {}

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
        retry: bool = True,
        passthrough: tuple[int, ...] = (),
    ) -> httpx.Response:
        """Send a request from the calling thread; returns a 2xx (or passthrough) response."""
        if self._closed:
            raise LoopwrightError("this client is closed")
        content = self._encode(body)
        headers = self._content_headers(body, content) or None
        attempts = _Attempts(self.retry, retry)
        while True:
            try:
                response = self._client.request(
                    method,
                    path,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                delay = attempts.after_error(exc)
                if delay is None:
                    raise _connection_error(exc, method, path) from exc
                time.sleep(delay)
                continue
            delay = attempts.after_response(response, passthrough)
            if delay is None:
                return _finish(response, passthrough)
            time.sleep(delay)

    async def arequest(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
        retry: bool = True,
        passthrough: tuple[int, ...] = (),
        pool: str = "api",
    ) -> httpx.Response:
        """Send a request from the event loop; same contract as ``request``."""
        return await self._asend(
            method,
            path,
            body=body,
            params=params,
            timeout=timeout,
            retry=retry,
            passthrough=passthrough,
            pool=pool,
            stream=False,
        )

    async def astream(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        pool: str = "api",
    ) -> httpx.Response:
        """Like ``arequest``, but a 2xx answer comes back unread: the caller reads its body as it
        arrives (``aiter_lines``) and must ``aclose`` it. Error answers are read and raised, and
        retried as ``arequest`` retries them."""
        return await self._asend(
            method, path, body=body, headers=headers, timeout=timeout, pool=pool, stream=True
        )

    async def _asend(
        self,
        method: str,
        path: str,
        *,
        body: Any,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None,
        retry: bool = True,
        passthrough: tuple[int, ...] = (),
        pool: str,
        stream: bool,
    ) -> httpx.Response:
        client = self._aclient(pool)
        content = self._encode(body)
        sent = {**self._content_headers(body, content), **(headers or {})}
        attempts = _Attempts(self.retry, retry)
        request_timeout = (
            httpx.Timeout(timeout, pool=None) if timeout is not None else httpx.USE_CLIENT_DEFAULT
        )
        while True:
            try:
                request = client.build_request(
                    method,
                    path,
                    content=content,
                    params=params,
                    headers=sent or None,
                    timeout=request_timeout,
                )
                response = await client.send(request, stream=stream)
                final = response.status_code < 400 or response.status_code in passthrough
                if stream and not final:  # an error answer is read (for its detail) and let go
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
            except httpx.TransportError as exc:
                delay = attempts.after_error(exc)
                if delay is None:
                    raise _connection_error(exc, method, path) from exc
                await asyncio.sleep(delay)
                continue
            delay = attempts.after_response(response, passthrough)
            if delay is None:
                return _finish(response, passthrough)
            await asyncio.sleep(delay)

    def download(
        self,
        path: str,
        sink: BinaryIO,
        *,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Headers:
        """Stream a GET's body into ``sink`` from the calling thread; returns the headers.

        A retry writes the body again from the start of ``sink``; an error answer raises
        before anything is written.
        """
        if self._closed:
            raise LoopwrightError("this client is closed")
        attempts = _Attempts(self.retry, True)
        while True:
            try:
                with self._client.stream(
                    "GET",
                    path,
                    params=params,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                ) as response:
                    delay = attempts.after_response(response, ())
                    if delay is None:
                        return _stream_into(response, sink)
            except httpx.TransportError as exc:
                delay = attempts.after_error(exc)
                if delay is None:
                    raise _connection_error(exc, "GET", path) from exc
            time.sleep(delay)

    def close(self) -> None:
        """Close the sync client (the async ones are closed by ``aclose`` on their loop)."""
        self._closed = True
        self._client.close()

    async def aclose(self) -> None:
        """Close the async clients; call on the loop that used them."""
        clients, self._aclients = list(self._aclients.values()), {}
        for client in clients:
            await client.aclose()
