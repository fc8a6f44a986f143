"""Wake a worker when it has work: on PostgreSQL a ``NOTIFY loopwright_wake, '<queue>'`` sent in
the submitting transaction (delivered at its commit, straight to the worker's listening
connection; inserting a pending operation sends it by itself, through a trigger); elsewhere a ``loopwright.drain`` message to the worker's Celery queue, sent after
the commit.

Either nudge carries nothing but the queue: the worker reads what to do from the database, so a
lost, duplicated or reordered nudge never loses, repeats or reorders work (a worker also looks
for work left waiting at every heartbeat).
"""

from __future__ import annotations

from functools import lru_cache

from celery import Celery
from django.conf import settings
from django.db import connection, transaction

DRAIN_TASK = "loopwright.drain"
WAKE_CHANNEL = "loopwright_wake"


def broker_url(configured: str) -> str:
    """The embedded ``filesystem://`` broker uses our atomic-write variant of the transport."""
    if configured.startswith("filesystem"):
        from .broker_fs import register

        return register()
    return configured


def broker_options(broker_url: str, broker_dir) -> dict:
    if broker_url.startswith(("filesystem", "lwfs")):
        folder, control = broker_dir / "messages", broker_dir / "control"
        folder.mkdir(parents=True, exist_ok=True)
        control.mkdir(parents=True, exist_ok=True)
        return {
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "control_folder": str(control),
            "store_processed": False,
        }
    return {}


@lru_cache(maxsize=1)
def celery_client() -> Celery:
    app = Celery("loopwright-controlplane", broker=broker_url(settings.BROKER_URL))
    app.conf.broker_transport_options = broker_options(settings.BROKER_URL, settings.BROKER_DIR)
    app.conf.task_ignore_result = True
    app.conf.broker_connection_retry_on_startup = True
    return app


def wakes_by_notify() -> bool:
    """Whether workers are woken through PostgreSQL (they listen when this is true)."""
    return settings.WAKE_WORKERS_BY_NOTIFY and settings.DATABASES["default"]["ENGINE"].endswith(
        "postgresql"
    )


def wake_worker(queue: str, *, inserted: bool = False) -> None:
    """Nudge ``queue`` once the current transaction commits (at once outside a transaction).

    ``inserted``: the nudge is for a pending operation just inserted, which on PostgreSQL wakes
    its worker by itself (a trigger on the operations table sends the notice).
    """
    if wakes_by_notify():
        if inserted:
            return
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify(%s, %s)", [WAKE_CHANNEL, queue])
        return
    transaction.on_commit(lambda: celery_client().send_task(DRAIN_TASK, queue=queue))
