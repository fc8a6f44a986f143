"""Wake a worker: send a ``loopwright.drain`` message to its queue (after the transaction commits).

The message carries nothing but a nudge: the worker reads what to do from the database, so a lost,
duplicated or reordered message never loses, repeats or reorders work.
"""

from __future__ import annotations

from functools import lru_cache

from celery import Celery
from django.conf import settings
from django.db import transaction

DRAIN_TASK = "loopwright.drain"


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


def wake_worker(queue: str) -> None:
    """Nudge ``queue`` once the current transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: celery_client().send_task(DRAIN_TASK, queue=queue))
