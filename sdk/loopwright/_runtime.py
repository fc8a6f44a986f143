"""What the clients made by one ServiceClient share: HTTP, the event loop thread, heartbeats.

It turns a request body into an APIFuture (send, then poll) and tears everything down on close.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ._http import HTTPClient
from ._loop import EventLoopThread
from ._ordering import Ticket
from ._session import Heartbeat
from .errors import APIResponseValidationError, APIStatusError
from .futures import APIFuture, OnWait, Submitted, await_future, send_request
from .types import ClientConfigResponse

__all__ = ["Runtime", "wire"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def wire(model: BaseModel) -> dict[str, Any]:
    """A request body as JSON data: None fields are left out, as the tinker SDK does."""
    body: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
    return body


class Runtime:
    """Owns the HTTP client, the event loop thread and the heartbeat thread."""

    def __init__(self, http: HTTPClient, heartbeat_interval: float, sdk_version: str = "") -> None:
        self.http = http
        self.loop = EventLoopThread()
        self.heartbeat = Heartbeat(http, heartbeat_interval)
        self._sdk_version = sdk_version
        self._config: ClientConfigResponse | None = None
        self._config_lock = threading.Lock()
        self.queue_progress = True
        """Whether waits in the server's placement queue are shown (``ServiceClient``'s)."""

    def client_config(self) -> ClientConfigResponse:
        """The server's flags for this client (``client/config``), asked once. A server that
        does not answer them (an older one) gets the defaults: JSON forward_backward."""
        with self._config_lock:
            if self._config is None:
                try:
                    answer = self.http.request(
                        "POST", "client/config", body={"sdk_version": self._sdk_version}
                    ).json()
                    self._config = ClientConfigResponse.model_validate(answer)
                except (APIStatusError, APIResponseValidationError, ValidationError, ValueError):
                    self._config = ClientConfigResponse()
            return self._config

    def get(self, path: str, cls: type[M], params: dict[str, str] | None = None) -> M:
        """GET a resource from the calling thread."""
        return self._read(self.http.request("GET", path, params=params).json(), cls, path)

    def post(self, path: str, cls: type[M], body: Any = None) -> M:
        """POST a request answered directly (not with a future), from the calling thread."""
        return self._read(self.http.request("POST", path, body=body).json(), cls, path)

    @staticmethod
    def _read(data: Any, cls: type[M], path: str) -> M:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise APIResponseValidationError(f"unexpected answer from {path}: {exc}") from exc

    def submit(self, coro: Coroutine[Any, Any, T]) -> APIFuture[T]:
        """Run ``coro`` on the event loop thread; its outcome becomes an APIFuture."""
        return APIFuture(self.loop.submit(coro), self.loop.in_loop_thread)

    def operation(
        self, path: str, body: Any, parse: Callable[[Any], T], on_wait: OnWait | None = None
    ) -> APIFuture[T]:
        """POST an operation now and poll its future in the background; ``on_wait`` hears
        each pending answer (e.g. a place in the placement queue)."""

        async def run() -> T:
            try:
                sent = await send_request(self.http, path, body)
                return await await_future(self.http, sent, parse, on_wait)
            finally:
                if on_wait is not None:
                    on_wait({})  # settled: it waits for nothing any more

        return self.submit(run())

    def ordered(
        self,
        path: str,
        bodies: list[Any],
        parse: Callable[[Any], Any],
        combine: Callable[[list[Any]], T],
        ticket: Ticket,
    ) -> APIFuture[T]:
        """Send ``bodies`` concurrently once the ticket's turn comes, then poll them all.

        The tickets chain a model's calls, so its requests reach the server in call order (the
        server still orders by seq_id; this keeps it from waiting on gaps).
        """

        async def run() -> T:
            try:
                if ticket.after is not None:
                    await asyncio.wrap_future(ticket.after)
                outcomes = await asyncio.gather(
                    *(send_request(self.http, path, body) for body in bodies),
                    return_exceptions=True,
                )
            finally:
                ticket.done_sending()
            sent = [o for o in outcomes if isinstance(o, Submitted)]
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            if failed:
                for s in sent:
                    await s.close()  # their operations run on; this call fails as a whole
                raise failed[0]
            if len(sent) == 1:  # (gather would wrap it in a task of its own)
                results = [await await_future(self.http, sent[0], parse)]
            else:
                results = await asyncio.gather(*(await_future(self.http, s, parse) for s in sent))
            return combine(list(results))

        return self.submit(run())

    def cancel_pending(self) -> None:
        """End the event loop thread: pending futures fail with "client closed"."""
        self.loop.close(cleanup=self.http.aclose)

    def close(self) -> None:
        """Stop heartbeats, cancel pending futures, join the threads and close connections."""
        self.heartbeat.stop()
        self.cancel_pending()
        self.http.close()
