"""A private asyncio event loop on a daemon thread: sends requests and polls futures concurrently.

Callers on any thread (or inside their own event loop) hand it coroutines and get
``concurrent.futures.Future`` objects back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .errors import LoopwrightError

__all__ = ["EventLoopThread"]

T = TypeVar("T")


class EventLoopThread:
    """Starts on the first ``submit``; ``close`` cancels what is pending and joins the thread."""

    def __init__(self, name: str = "loopwright-io") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise LoopwrightError("this client is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(loop, ready), name=self._name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on this loop's thread (where blocking would deadlock)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its result or exception lands in the returned future."""
        try:
            loop = self._ensure_started()
        except LoopwrightError:
            coro.close()  # never scheduled: close it so it is not reported as never awaited
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def close(self, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
        """Cancel pending work, run ``cleanup`` on the loop, stop it and join its thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise LoopwrightError("close() cannot be called from the client's own event loop")

        async def _shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if cleanup is not None:
                await cleanup()
            await asyncio.get_running_loop().shutdown_asyncgens()

        try:
            asyncio.run_coroutine_threadsafe(_shutdown(), loop).result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            if not thread.is_alive():
                loop.close()
