"""gunicorn's settings for the control plane in production (the images and the chart use it):

    gunicorn -c python:controlplane.gunicorn_conf controlplane.wsgi:application

``LOOPWRIGHT_HTTP_HOST`` (0.0.0.0), ``LOOPWRIGHT_HTTP_PORT`` (8000), ``LOOPWRIGHT_HTTP_WORKERS`` (processes, 1) and
``LOOPWRIGHT_HTTP_THREADS`` (64 each: long polls hold one each),
``LOOPWRIGHT_HTTP_MAX_CONNECTIONS`` (1000 each; 503 past it); ``LOOPWRIGHT_METRICS_PORT``
binds a second port that alone answers ``/metrics``. With more than one process the metrics of
all of them are added up through ``PROMETHEUS_MULTIPROC_DIR`` (a private folder unless one is
given; the metric files left in it are removed at each start). Logs as
``LOOPWRIGHT_LOG_FORMAT`` says, gunicorn's own too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from controlplane.observability.logs import logging_config

_host = os.environ.get("LOOPWRIGHT_HTTP_HOST", "0.0.0.0")  # noqa: S104 — a container's port; LOOPWRIGHT_HTTP_HOST narrows it
_port = int(os.environ.get("LOOPWRIGHT_HTTP_PORT", "8000"))
_metrics_port = int(os.environ.get("LOOPWRIGHT_METRICS_PORT", "0") or 0)

bind = [f"{_host}:{_port}"] + ([f"{_host}:{_metrics_port}"] if _metrics_port else [])
# uvicorn under gunicorn: a request is read whole on the event loop, within
# LOOPWRIGHT_HTTP_REQUEST_DEADLINE, before one of the threads runs it (controlplane/serving)
worker_class = "controlplane.serving.worker.Worker"
workers = int(os.environ.get("LOOPWRIGHT_HTTP_WORKERS", "1"))
threads = int(os.environ.get("LOOPWRIGHT_HTTP_THREADS", "64"))
worker_connections = int(os.environ.get("LOOPWRIGHT_HTTP_MAX_CONNECTIONS", "1000"))
timeout = 120  # seconds a worker's event loop may stall before gunicorn restarts it
graceful_timeout = 30
keepalive = 75  # longer than the idle timeout of common load balancers (60 s)
logconfig_dict = logging_config(
    fmt=os.environ.get("LOOPWRIGHT_LOG_FORMAT", "text"),
    level=os.environ.get("LOOPWRIGHT_LOG_LEVEL", "INFO"),
)

# Set before any process imports prometheus_client: the workers, forked after this, count into
# files there.
if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="lw-metrics-")


def on_starting(server) -> None:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:  # counts left by a previous start would be added to this one's
        os.makedirs(folder, exist_ok=True)
        for left in Path(folder).glob("*.db"):  # the client's files only
            left.unlink(missing_ok=True)


def child_exit(server, worker) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
