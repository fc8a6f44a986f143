"""Faults for end-to-end tests: kill -9 the worker that holds a model at a chosen moment, stop
one past its lease, restart a private PostgreSQL or Redis server, kill the control plane.

The moment is read from the stack's database: a helper thread waits until the model's next
operation of a kind is running on a worker, then kills that worker process.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .stack import Stack, free_port

PG_BIN = next(Path("/usr/lib/postgresql").glob("*/bin"), Path("/usr/lib/postgresql/15/bin"))


def database(stack: Stack):
    """A connection to the stack's database (PostgreSQL, or the embedded SQLite file), taking
    ``%s`` parameters and ``now()`` either way."""
    if "DATABASE_URL" in stack.env:
        return psycopg.connect(stack.env["DATABASE_URL"], autocommit=True)
    return _Sqlite(stack.data_dir / "loopwright.sqlite3")


class _Sqlite:
    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)

    def execute(self, sql: str, params=()):
        sql = sql.replace("%s", "?").replace("now()", "strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return self.conn.execute(sql, list(params))

    def __enter__(self) -> _Sqlite:
        return self

    def __exit__(self, *exc) -> None:
        self.conn.close()


def holder(conn: psycopg.Connection, model_id: str) -> str | None:
    """The name of the worker a model is on now (None while it waits for one)."""
    row = conn.execute(
        "SELECT w.name FROM training_sessions_trainingmodel m "
        "LEFT JOIN fleet_worker w ON w.id = m.worker_id WHERE m.id = %s",
        [model_id],
    ).fetchone()
    return row[0] if row else None


def wait_registered(stack: Stack, name: str, after_generation: int = 0, timeout=120) -> int:
    """Wait until worker ``name`` holds a lease newer than ``after_generation``."""
    deadline = time.monotonic() + timeout
    with database(stack) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT generation FROM fleet_worker WHERE name = %s AND state = 'active' "
                "AND lease_expires_at > now()",
                [name],
            ).fetchone()
            if row and row[0] > after_generation:
                return row[0]
            time.sleep(0.2)
    raise RuntimeError(f"worker {name} did not register: {stack.logs()}")


def generation(stack: Stack, name: str) -> int:
    with database(stack) as conn:
        row = conn.execute("SELECT generation FROM fleet_worker WHERE name = %s", [name]).fetchone()
    return row[0] if row else 0


@dataclass
class Kill:
    """One fault, when and what it hit: the worker and whether the operation was running."""

    point: str
    step: int
    worker: str | None = None
    while_running: bool = False


@dataclass
class Killer:
    """Kills the worker holding ``model_id`` at chosen (point, step)s of a training loop, from
    a thread of its own (the loop goes on), and starts it again: at once (``at_once``: it
    registers before its lease runs out, declaring its previous process dead itself), or once
    another worker has taken the model over."""

    stack: Stack
    model_id: str
    schedule: set[tuple[str, int]]
    signum: int = signal.SIGKILL
    at_once: bool = False
    kills: list[Kill] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def at(self, point: str, step: int, kind: str | None = None, sampler: str | None = None):
        """Called by the loop at each point; ``kind``: called just before the loop submits an
        operation of that kind (of the model, or of ``sampler``), kill once it is running;
        else kill now."""
        if (point, step) not in self.schedule:
            return
        self.join()  # one fault at a time: the last one's worker is back first
        kill = Kill(point, step)
        self.kills.append(kill)
        seen = self._seen(kind, sampler) if kind else set()
        t = threading.Thread(target=self._kill_when_running, args=(kill, kind, sampler, seen))
        t.start()
        self._threads.append(t)

    def _where(self, sampler: str | None) -> tuple[str, str]:
        return ("sampling_session_id", sampler) if sampler else ("model_id", self.model_id)

    def join(self) -> None:
        for t in self._threads:
            t.join()

    def _holder(self) -> str | None:
        with database(self.stack) as conn:
            return holder(conn, self.model_id)

    def _seen(self, kind: str, sampler: str | None) -> set[str]:
        """The operations of ``kind`` there are before the one to be killed in."""
        column, key = self._where(sampler)
        with database(self.stack) as conn:
            rows = conn.execute(
                f"SELECT id FROM training_sessions_operation WHERE {column} = %s AND kind = %s",
                [key, kind],
            ).fetchall()
        return {row[0] for row in rows}

    def _kill_when_running(
        self, kill: Kill, kind: str | None, sampler: str | None, seen: set[str]
    ) -> None:
        if kind is None:
            self._kill(kill, self._holder())
            return
        column, key = self._where(sampler)
        deadline = time.monotonic() + 20
        with database(self.stack) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT o.id, o.status, w.name FROM training_sessions_operation o "
                    "LEFT JOIN fleet_worker w ON w.id = o.worker_id "
                    f"WHERE o.{column} = %s AND o.kind = %s ORDER BY o.created_at DESC LIMIT 1",
                    [key, kind],
                ).fetchone()
                if row and row[0] not in seen:
                    if row[1] == "running":
                        kill.while_running = True
                        self._kill(kill, row[2])
                        return
                    if row[1] in ("done", "failed"):
                        break
                time.sleep(0.001)
        self._kill(kill, self._holder())  # it finished first: right after it, then

    def _kill(self, kill: Kill, name: str | None) -> None:
        if name is None:
            return
        kill.worker = name
        before = generation(self.stack, name)
        self.stack.signal_worker(name, self.signum)
        self.stack.wait_worker_gone(name)
        if not self.at_once:  # another worker declares it dead and takes the model
            deadline = time.monotonic() + 60
            while self._holder() in (name, None) and time.monotonic() < deadline:
                time.sleep(0.1)
        self.stack.start_worker(name)
        wait_registered(self.stack, name, before)


class PrivatePostgres:
    """A PostgreSQL server of the test's own (it restarts it), on a free port, in a folder
    the ``postgres`` user can reach (pytest's are private to root)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="lw-pg-"))
        self.folder.chmod(0o755)
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self._as_postgres(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"
        )

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def _as_postgres(self, *cmd: str) -> None:
        runner = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        subprocess.run([*runner, *cmd], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
            str(self.folder / "log"), "-w", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``immediate``: as a crash (no checkpoint; what was not flushed is lost)."""
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class PrivateRedis:
    """A Redis server of the test's own (it restarts it), on a free port, keeping nothing."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--maxmemory-policy", "noeviction"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if (
                subprocess.run(
                    ["redis-cli", "-p", str(self.port), "ping"], capture_output=True
                ).stdout.strip()
                == b"PONG"
            ):
                return
            time.sleep(0.1)
        raise RuntimeError("redis did not start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
