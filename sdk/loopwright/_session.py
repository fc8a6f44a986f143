"""Sessions: opening one, its counters, stopping it, and the thread that keeps them alive.

One heartbeat thread per ServiceClient beats for all of its live sessions every 10 s.
"""

from __future__ import annotations

import logging
import threading
import time

from ._http import HTTPClient
from .errors import APIError, GoneError, NotFoundError
from .types import SessionInfo

__all__ = ["Heartbeat", "Session", "stop_quietly"]

logger = logging.getLogger("loopwright")

_WARN_AFTER_SECONDS = 120.0


class Heartbeat:
    """Sends session_heartbeat for each registered session; drops a session on 404 or 410.

    The thread starts when the first session is added and ends when none is left or on stop().
    """

    def __init__(self, http: HTTPClient, interval: float) -> None:
        self._http = http
        self._interval = interval
        self._lock = threading.Lock()
        self._sessions: dict[str, float] = {}  # session id -> monotonic time of the last beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def sessions(self) -> set[str]:
        """Ids of the sessions being kept alive."""
        with self._lock:
            return set(self._sessions)

    @property
    def running(self) -> bool:
        """Whether the heartbeat thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def add(self, session_id: str) -> None:
        """Start beating for a session."""
        with self._lock:
            if self._stop.is_set():
                return
            self._sessions[session_id] = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="loopwright-heartbeat", daemon=True
                )
                self._thread.start()

    def discard(self, session_id: str) -> None:
        """Stop beating for a session."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                if not self._sessions:
                    self._thread = None
                    return
                due = list(self._sessions)
            for session_id in due:
                if self._stop.is_set():
                    return
                self._beat(session_id)

    def _beat(self, session_id: str) -> None:
        try:
            self._http.request(
                "POST",
                "session_heartbeat",
                body={"session_id": session_id},
                retry=False,
                timeout=10.0,
            )
        except (GoneError, NotFoundError):
            logger.info("session %s is finished; heartbeats stop", session_id)
            self.discard(session_id)
            return
        except APIError as exc:
            with self._lock:
                last = self._sessions.get(session_id)
            if last is not None and time.monotonic() - last > _WARN_AFTER_SECONDS:
                logger.warning("heartbeats for session %s failing: %s", session_id, exc)
            return
        with self._lock:
            if session_id in self._sessions:
                self._sessions[session_id] = time.monotonic()

    def stop(self) -> None:
        """End the thread (for good) and wait for it."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
            self._sessions.clear()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=15)


class Session:
    """A live session: its id, the counters of what it opens, and stop()."""

    def __init__(
        self,
        http: HTTPClient,
        heartbeat: Heartbeat,
        session_id: str,
        *,
        next_sampling_session_seq_id: int = 0,
    ) -> None:
        """``next_sampling_session_seq_id``: where this client's samplers start counting; in a
        session another client opened, after the numbers it used (each number is one sampler)."""
        self.session_id = session_id
        self._http = http
        self._heartbeat = heartbeat
        self._lock = threading.Lock()
        self._next_model_seq_id = 0
        self._next_sampling_session_seq_id = next_sampling_session_seq_id
        self._stopped_info: SessionInfo | None = None
        heartbeat.add(session_id)

    @property
    def stopped(self) -> bool:
        """Whether stop() succeeded."""
        return self._stopped_info is not None

    def next_model_seq_id(self) -> int:
        """The model_seq_id of the next training model created in this session (from 0)."""
        with self._lock:
            value, self._next_model_seq_id = self._next_model_seq_id, self._next_model_seq_id + 1
            return value

    def next_sampling_session_seq_id(self) -> int:
        """The sampling_session_seq_id of the next sampler opened in this session (from 0)."""
        with self._lock:
            value = self._next_sampling_session_seq_id
            self._next_sampling_session_seq_id += 1
            return value

    def info(self) -> SessionInfo:
        """The session's current state."""
        response = self._http.request("GET", f"sessions/{self.session_id}")
        return SessionInfo.model_validate(response.json())

    def stop(self) -> SessionInfo:
        """Stop the session (it stops counting against the quota); safe to call twice."""
        if self._stopped_info is not None:
            return self._stopped_info
        self._heartbeat.discard(self.session_id)
        try:
            response = self._http.request("POST", f"sessions/{self.session_id}/stop")
            info = SessionInfo.model_validate(response.json())
        except GoneError:
            info = self.info()
        self._stopped_info = info
        return info


def stop_quietly(session: Session, *, raise_errors: bool) -> None:
    """Stop a session on the way out of a ``with`` block; while an exception is already
    propagating, a failure to stop is logged rather than raised over it."""
    try:
        session.stop()
    except APIError as exc:
        if raise_errors:
            raise
        logger.warning("could not stop session %s: %s", session.session_id, exc)
