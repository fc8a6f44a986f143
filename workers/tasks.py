"""Celery tasks: thin, no state in the message; the runtime reads the work from the database."""

from __future__ import annotations

from django.db import close_old_connections

from controlplane.dispatch import DRAIN_TASK

from .celery_app import app, runtime


@app.task(name=DRAIN_TASK, ignore_result=True)
def drain() -> int:
    close_old_connections()
    try:
        return runtime().drain()
    finally:
        close_old_connections()
