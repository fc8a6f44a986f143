"""The control plane's own Celery application: periodic housekeeping on the ``housekeeping``
queue, scheduled by Celery beat (a separate process from the GPU workers).

    celery -A controlplane.celery_app worker -B -Q housekeeping --pool solo

is the Celery way to run what ``manage.py janitor --loop`` runs; use one or the other.
"""

from __future__ import annotations

import os

import django
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from django.conf import settings  # noqa: E402

from controlplane.dispatch import broker_options, broker_url  # noqa: E402

QUEUE = "housekeeping"

app = Celery("loopwright-housekeeping", broker=broker_url(settings.BROKER_URL))
app.conf.update(
    broker_transport_options={
        **broker_options(settings.BROKER_URL, settings.BROKER_DIR),
        "polling_interval": 0.2,
    },
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    beat_schedule={
        "sweep": {"task": "loopwright.housekeeping.sweep", "schedule": settings.SWEEP_SECONDS},
        "billing-push": {
            "task": "loopwright.billing.push",
            "schedule": settings.STRIPE_PUSH_EVERY_SECONDS,
        },
    },
    beat_schedule_filename=str(settings.DATA_DIR / "celerybeat-schedule"),
    worker_hijack_root_logger=False,
    imports=("controlplane.tasks",),
)
