"""uvicorn's HTTP/1.1 protocol (httptools), held to ``ServingLimits``: a request's headers and whole
body must arrive within the deadline counted from its first byte (from the connection's opening
for its first request), however slowly they trickle, or the client gets 408 and the connection
is closed; at most so many open connections per address (429); a request line, header count
and header size within gunicorn's ``limit_request_*`` settings (414 / 431)."""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .limits import AddressCount, ServingLimits

log = logging.getLogger("loopwright.serving")
OPEN = AddressCount()  # this process's connections


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; the answer is in ``_refusal``."""


class GuardedProtocol(HttpToolsProtocol):
    def __init__(self, *args, limits: ServingLimits, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._deadline: asyncio.TimerHandle | None = None
        self._paused_for_pipeline = False
        self._address: str | None = None
        self._refusal: tuple[int, str] | None = None
        self._line_bytes = 0
        self._fields = 0

    # -- the connection ------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if not OPEN.admit(address, self.limits.per_address):
            limit = self.limits.per_address
            self._answer(429, f"too many connections from this address (the limit is {limit})")
            return
        self._address = address
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            OPEN.release(self._address)
            self._address = None
        super().connection_lost(exc)

    # -- the deadline --------------------------------------------------------------------
    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.limits.deadline, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()  # a request trickling in behind a response going out
            return
        log.info("closed a connection from %s: request not received in time", self._address)
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app stops waiting for the rest of the body
            cycle.message_event.set()
        seconds = f"{self.limits.deadline:g}"
        self._answer(408, f"the request's headers and body must arrive within {seconds} seconds")

    def on_message_begin(self) -> None:
        self._line_bytes = self._fields = 0
        self._arm()  # the first byte of the next request on a kept-alive connection
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self.pipeline and self.pipeline[0][0] is self.cycle:
            # queued behind a response, with reading paused: its clock waits too
            self._disarm()
            self._paused_for_pipeline = True

    def on_message_complete(self) -> None:
        self._disarm()
        self._paused_for_pipeline = False
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._paused_for_pipeline and self.cycle is not None and self.cycle.more_body:
            self._paused_for_pipeline = False
            self._arm()

    # -- the size of the request line and headers ----------------------------------------
    def on_url(self, url: bytes) -> None:
        self._line_bytes += len(url)
        limit = self.limits.request_line
        if limit and self._line_bytes > limit:
            self._refusal = (414, f"the request line is longer than {limit} bytes")
            raise _Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self.limits.header_fields and self._fields > self.limits.header_fields:
            self._refusal = (431, f"more than {self.limits.header_fields} header fields")
            raise _Refused
        size = self.limits.header_field_size
        if size and len(name) + len(value) > size:
            self._refusal = (431, f"a header field is longer than {size} bytes")
            raise _Refused
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        """A request the parser refused; ours (``_Refused``) answers with its own status."""
        if self._refusal is not None:
            self._answer(*self._refusal)
        else:
            super().send_400_response(msg)

    def _answer(self, status: int, message: str) -> None:
        """A plain-text answer of the server itself, then the connection is closed."""
        body = message.encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        if status == 429:
            head.append(f"retry-after: {max(1, int(self.limits.deadline))}\r\n".encode())
        head.append(
            b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
        )
        self.transport.write(b"".join(head) + body)
        self.transport.close()
