"""The Celery application of a GPU worker: one process, one queue, one engine host.

Start it with ``python -m workers.run`` (which sets the queue and the solo pool). The engine is
loaded in the worker process itself, never in a forked child (CUDA cannot be re-initialised
after fork).
"""

from __future__ import annotations

import os
import signal

import django
from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from django.conf import settings  # noqa: E402

from controlplane.dispatch import DRAIN_TASK, broker_options, broker_url  # noqa: E402

from .telemetry import watch_host  # noqa: E402

app = Celery("loopwright-worker", broker=broker_url(settings.BROKER_URL))
transport_options = broker_options(settings.BROKER_URL, settings.BROKER_DIR)
if settings.BROKER_URL.startswith("filesystem"):
    # The embedded broker is a folder the worker polls: look often. Redis and RabbitMQ push
    # (a short interval there only makes the worker's main thread wake and re-ask 50 times a
    # second, taking the interpreter lock from the engine's thread each time).
    transport_options["polling_interval"] = 0.02
app.conf.update(
    broker_transport_options=transport_options,
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_acks_late=False,  # work is claimed from the database; a lost nudge costs nothing
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    imports=("workers.tasks",),
)

_runtime = None


def runtime():
    """The process's engine runtime, created once when the worker starts."""
    global _runtime
    if _runtime is None:
        from .runtime import WorkerRuntime, WorkerSettings

        _runtime = WorkerRuntime(WorkerSettings.from_env())
        watch_host(_runtime)
    return _runtime


def current_runtime():
    """The runtime if it has been created (the probes ask before the model has loaded)."""
    return _runtime


@signals.worker_ready.connect
def _start(sender=None, **kwargs) -> None:
    rt = runtime()
    _stop_on_term(rt)
    # Work submitted while no worker ran (or before a restart) is waiting: look at once.
    app.send_task(DRAIN_TASK, queue=rt.settings.queue)


def _stop_on_term(rt) -> None:
    """SIGTERM (or SIGINT) first tells the runtime to take no more work, so the drain in
    progress ends after its current operation; then Celery's own warm shutdown runs, whose
    ``worker_shutdown`` snapshots and hands the models over (``WorkerRuntime.shutdown``)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(number, frame, previous=previous) -> None:
            rt.request_stop()
            if callable(previous):
                previous(number, frame)

        signal.signal(signum, handler)


@signals.worker_shutdown.connect
def _stop(sender=None, **kwargs) -> None:
    if _runtime is not None:
        _runtime.shutdown()
