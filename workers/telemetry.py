"""A worker's own HTTP port (``LOOPWRIGHT_WORKER_METRICS_PORT``; off when unset): ``/metrics``
(this process: operations, latencies, tokens, adapters, resident memory), ``/healthz`` (alive:
its heartbeat thread is not stuck) and ``/readyz`` (it holds a live lease, so it takes work).

It starts before the base model loads, so that a liveness probe sees a worker that is still
loading as alive; ``/readyz`` answers 503 until it has registered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from controlplane import metrics
from controlplane import worker_port as port

log = logging.getLogger("loopwright.worker")


class Lease(Protocol):
    """What the probes read off the running worker (``WorkerRuntime``)."""

    def lease_held(self) -> bool: ...
    def heartbeat_age(self) -> float: ...


def operation_recorded(op, outcome: str) -> None:
    """Count an operation this worker finished (``done``, ``failed``, ``retried``); for a done
    one also its latencies and tokens. Timestamps are the database row's: submit (the control
    plane's clock) to start and start to done (this worker's)."""
    metrics.OPERATIONS_FINISHED.labels(op.kind, outcome).inc()
    if outcome != "done":
        return
    created, started, finished = op.created_at, op.started_at, op.finished_at
    if isinstance(created, datetime) and isinstance(started, datetime):
        metrics.QUEUE_SECONDS.labels(op.kind).observe(max(0.0, (started - created).total_seconds()))
    if isinstance(started, datetime) and isinstance(finished, datetime):
        metrics.RUN_SECONDS.labels(op.kind).observe(max(0.0, (finished - started).total_seconds()))
    for meter, tokens in port.operation_usage(op.kind, op.payload or {}, op.result or {}).items():
        metrics.TOKENS.labels(str(meter)).inc(tokens)


class _Handler(BaseHTTPRequestHandler):
    lease: Callable[[], Lease | None]
    stale_after: float

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            rt = self.lease()
            stuck = rt is not None and rt.heartbeat_age() > self.stale_after
            self._send(503 if stuck else 200, b"heartbeat stuck\n" if stuck else b"ok\n")
        elif path == "/readyz":
            rt = self.lease()
            ready = rt is not None and rt.lease_held()
            self._send(200 if ready else 503, b"ready\n" if ready else b"no lease\n")
        else:
            self._send(404, b"not found\n")

    def _send(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # scrapes every few seconds: quiet
        pass


def serve(
    port: int, lease: Callable[[], Lease | None], *, stale_after: float
) -> ThreadingHTTPServer:
    """Serve the worker's port from a daemon thread; ``lease()`` is the runtime once created;
    ``stale_after``: seconds without a heartbeat after which ``/healthz`` fails."""
    handler = type(
        "Handler", (_Handler,), {"lease": staticmethod(lease), "stale_after": stale_after}
    )
    server = ThreadingHTTPServer(("0.0.0.0", port), handler)  # noqa: S104 — the pod's probe and scrape port, inside the cluster
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="worker-telemetry", daemon=True).start()
    log.info("worker metrics and probes on port %d", server.server_address[1])
    return server


def watch_host(rt) -> None:
    """Gauges read at each scrape from the runtime's engine host and lease."""
    metrics.ADAPTERS_HELD.set_function(lambda: len(rt.host.pool.ids()))
    metrics.ADAPTERS_LOADED.set_function(lambda: len(rt.host.pool.loaded_ids()))
    metrics.LEASE_HELD.set_function(lambda: 1.0 if rt.lease_held() else 0.0)
    s = rt.settings
    metrics.WORKER_INFO.labels(s.name, s.base_model, s.device).set(1)
