"""The embedded default's SQLite under several writing processes at once (gunicorn's threads, each
worker process and housekeeping share one file): every write waits for the lock instead of
failing with "database is locked", and a transaction that reads a row and writes it back never
loses another process's write (transactions begin IMMEDIATE: the write lock is taken at BEGIN).

Each writer is a real process with the control plane's own settings on a data folder of its own
(no DATABASE_URL: the file ``manage.py serve`` uses), started together and writing as fast as it
can.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.stack import ROOT

WRITERS = 6
TRANSACTIONS = 60

WRITER = r"""
import sys, time
from pathlib import Path

import django

django.setup()
from django.conf import settings
from django.db import connection, transaction

me, n, folder = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
assert connection.vendor == "sqlite", connection.vendor
assert Path(settings.DATABASES["default"]["NAME"]) == folder / "loopwright.sqlite3"
(folder / f"ready-{me}").touch()
while not (folder / "go").exists():
    time.sleep(0.01)
for i in range(n):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT value FROM counter WHERE id = 1")
        (value,) = cursor.fetchone()
        time.sleep(0.005)  # another process would write meanwhile, were the lock not held
        cursor.execute("UPDATE counter SET value = %s WHERE id = 1", [value + 1])
        cursor.execute("INSERT INTO events (writer, seq) VALUES (%s, %s)", [me, i])
    with connection.cursor() as cursor:  # and a write outside any transaction
        cursor.execute("UPDATE counter SET touched = touched + 1 WHERE id = 1")
"""


def _env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWRIGHT_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    return env | {
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOOPWRIGHT_DATA_DIR": str(folder),
    }


def _run_writers(folder: Path, script: str) -> tuple[list[int], list[str]]:
    """``WRITERS`` processes running ``script`` on a fresh file in ``folder``, started together;
    their exit codes and what they wrote on stderr."""
    db = sqlite3.connect(folder / "loopwright.sqlite3")
    db.executescript(
        "PRAGMA journal_mode=WAL;"
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER, touched INTEGER);"
        "INSERT INTO counter VALUES (1, 0, 0);"
        "CREATE TABLE events (writer TEXT, seq INTEGER);"
    )
    db.close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i), str(TRANSACTIONS), str(folder)],
            env=_env(folder),
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WRITERS)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(folder.glob("ready-*"))) < WRITERS:
            assert time.monotonic() < deadline, "the writers did not start"
            if any(p.poll() is not None for p in procs):
                break  # one failed before it was ready: its stderr says why
            time.sleep(0.05)
        (folder / "go").touch()
        errors = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [p.returncode for p in procs], errors


def test_writers_in_many_processes_wait_for_the_lock_and_lose_nothing(tmp_path: Path) -> None:
    codes, errors = _run_writers(tmp_path, WRITER)
    assert codes == [0] * WRITERS, "\n".join(e[-3000:] for e in errors)
    db = sqlite3.connect(tmp_path / "loopwright.sqlite3")
    value, touched = db.execute("SELECT value, touched FROM counter").fetchone()
    per_writer = dict(db.execute("SELECT writer, COUNT(*) FROM events GROUP BY writer"))
    db.close()
    assert value == touched == WRITERS * TRANSACTIONS  # no write lost, none failed
    assert per_writer == {str(i): TRANSACTIONS for i in range(WRITERS)}


def test_the_embedded_default_waits_for_sqlites_lock(tmp_path: Path) -> None:
    """The settings every process of ``manage.py serve`` reads: a busy timeout, transactions
    that take the write lock when they begin, and a test database that is a file like the
    service's (an in-memory shared cache answers "database table is locked" at once, whatever
    the timeout)."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "d = settings.DATABASES['default']; "
        "print(d['ENGINE'], d['OPTIONS']['timeout'], d['OPTIONS']['transaction_mode'], "
        "d['TEST']['NAME'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    engine, timeout, mode, test_name = out.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert float(timeout) >= 30 and mode == "IMMEDIATE"
    assert test_name.endswith(".sqlite3") and "memory" not in test_name


def test_without_immediate_transactions_the_same_writers_fail(tmp_path: Path) -> None:
    """The check above can fail: with transactions that begin DEFERRED (Django's default), the
    same read-then-write transactions meet each other's locks and fail at once ("database is
    locked": a reader cannot be made to wait for a writer that committed after it read)."""
    deferred = WRITER.replace(
        "django.setup()\n",
        "from django.conf import settings as s\n"
        "s.DATABASES['default']['OPTIONS']['transaction_mode'] = 'DEFERRED'\n"
        "django.setup()\n",
        1,
    )
    codes, errors = _run_writers(tmp_path, deferred)
    assert any(codes) and any("database is locked" in e for e in errors), [e[-500:] for e in errors]
