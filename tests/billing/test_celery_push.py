"""The push runs on schedule in a real Celery worker with beat (``controlplane.celery_app``),
over the embedded broker, against the Stripe stand-in: every closed window arrives once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from .stripe_server import API_KEY
from .test_stripe_push import expected, received, usage  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def test_celery_beat_pushes_each_closed_window_once(usage, alice, charlie, stripe_server, tmp_path):  # noqa: F811
    if connection.vendor != "postgresql":
        pytest.skip("the worker process needs a database it can share: PostgreSQL")
    stripe_server.reset()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": database_url(),
        "LOOPWRIGHT_DATA_DIR": str(tmp_path),
        "LOOPWRIGHT_BROKER_URL": "filesystem://",
        "LOOPWRIGHT_STRIPE_API_KEY": API_KEY,
        "LOOPWRIGHT_STRIPE_API_BASE": stripe_server.url,
        "LOOPWRIGHT_STRIPE_PUSH_EVERY_SECONDS": "0.5",
        "LOOPWRIGHT_SWEEP_SECONDS": "1",
    }
    cmd = [sys.executable, "-m", "celery", "-A", "controlplane.celery_app", "worker", "-B"]
    cmd += ["-Q", "housekeeping", "--pool", "solo", "--loglevel", "WARNING"]
    log = tmp_path / "celery.log"
    with open(log, "w") as out:
        worker = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    want = expected(alice, charlie)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not set(want) <= set(stripe_server.state.events):
            assert worker.poll() is None, log.read_text()
            time.sleep(0.5)
        time.sleep(2)  # a few more scheduled runs: nothing may arrive twice
    finally:
        worker.terminate()
        worker.wait(30)
    got = received(stripe_server.state)
    assert {k: got.get(k) for k in want} == want, log.read_text()[-3000:]
    # alice's window after W2 (her 11 train tokens) has closed by now too; it arrives once
    assert len(got) == len(want) + 1
    posts = [p["identifier"] for p in stripe_server.state.event_posts()]
    assert len(posts) == len(set(posts)), "an identifier was sent twice"
