"""A running Loopwright for end-to-end tests: its own database, gunicorn, and a Celery worker
process on the tiny model, exactly as deployed (PostgreSQL + Redis) or embedded (SQLite +
filesystem broker)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
TINY = "loopwright/tiny-byte-llama"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    def __init__(
        self,
        backend: str,
        data_dir: Path,
        workers: dict[str, list[str]] | None = None,
        ready_model: str = TINY,
        *,
        env: dict[str, str] | None = None,
        pg_admin: str = PG_ADMIN,
    ) -> None:
        """``ready_model``: up once a worker serves it; ``env``: settings for every process
        (e.g. a short worker lease); ``pg_admin``: the PostgreSQL server to make the stack's
        database on (default: the machine's)."""
        self.backend = backend
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.worker_name = f"e2e-{secrets.token_hex(4)}"
        # worker name -> its extra ``workers.run`` flags; by default one on the open network
        self.workers = workers or {self.worker_name: []}
        self.db_name = f"lw_e2e_{secrets.token_hex(4)}"
        self.ready_model = ready_model  # up once a worker serves it
        self.worker_loglevel = "WARNING"
        self.procs: list[subprocess.Popen] = []
        self.worker_procs: dict[str, subprocess.Popen] = {}
        self.http_proc: subprocess.Popen | None = None
        self.log_files: list = []
        self.pg_admin = pg_admin
        self.keys: dict[str, str] = {}
        self.roles: dict[str, str] = {}  # each tenant's session role ARN
        self.accounts: dict[str, str] = {}
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1",
            "LOOPWRIGHT_DATA_DIR": str(data_dir),
            # each stack's own secrets, as production sets them (the serve backend has none)
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
            "LOOPWRIGHT_KMS_MASTER_KEY": secrets.token_urlsafe(48),
            "LOOPWRIGHT_LONG_POLL_SECONDS": "10",
            "PYTHONUNBUFFERED": "1",
        }
        if backend == "postgres-redis":
            server = pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgres://")
            self.env["DATABASE_URL"] = f"{server}/{self.db_name}"
            self.env["LOOPWRIGHT_BROKER_URL"] = "redis://127.0.0.1:6379/0"
        else:
            self.env.pop("DATABASE_URL", None)
            self.env["LOOPWRIGHT_BROKER_URL"] = "filesystem://"
        self.env.update(env or {})

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Stack:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            if self.backend == "postgres-redis" and self.pg_admin == PG_ADMIN:
                # a copy of a migrated database: CREATE DATABASE ... TEMPLATE takes a fraction of
                # a second where migrating takes several
                self._admin(f'CREATE DATABASE "{self.db_name}" TEMPLATE "{self._template()}"')
            else:
                if self.backend == "postgres-redis":
                    self._admin(f'CREATE DATABASE "{self.db_name}"')
                self._manage("migrate", "--verbosity", "0")
            for who in ("alice", "charlie"):
                account = json.loads(self._manage("create_tenant", "--name", who, "--json"))
                self.keys[who], self.roles[who] = account["api_key"], account["session_role_arn"]
                self.accounts[who] = account["account_id"]
            self.start_http()
            for name in self.workers:
                self.start_worker(name)
            self._wait_ready()
        except BaseException:
            self.stop()  # no process outlives a stack that did not come up
            raise
        return self

    def start_http(self) -> None:
        """The control plane as production runs it (gunicorn with ``controlplane.gunicorn_conf``),
        in a process group of its own."""
        self.http_proc = self._spawn(
            "http",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:controlplane.gunicorn_conf",
                "controlplane.wsgi:application",
            ],
            group=True,
            env={
                "LOOPWRIGHT_HTTP_HOST": "127.0.0.1",
                "LOOPWRIGHT_HTTP_PORT": str(self.port),
                # each thread keeps a database connection: two stacks fit the server's 100
                "LOOPWRIGHT_HTTP_THREADS": "16",
            },
        )

    def kill_http(self) -> None:
        """kill -9 of gunicorn and its workers, in the middle of whatever they do."""
        assert self.http_proc is not None
        os.killpg(self.http_proc.pid, signal.SIGKILL)
        self.http_proc.wait(timeout=30)

    def start_worker(self, name: str) -> subprocess.Popen:
        """A worker process named ``name`` (again, after it was killed or stopped)."""
        log_name = "worker" if name == next(iter(self.workers)) else f"worker-{name}"
        proc = self._spawn(
            log_name,
            [
                sys.executable,
                "-m",
                "workers.run",
                "--name",
                name,
                "--base-model",
                TINY,
                *self.workers[name],
                "--loglevel",
                self.worker_loglevel,
            ],
        )
        self.worker_procs[name] = proc
        return proc

    def signal_worker(self, name: str, signum: int = signal.SIGKILL) -> None:
        self.worker_procs[name].send_signal(signum)

    def wait_worker_gone(self, name: str, timeout: float = 60) -> int:
        return self.worker_procs[name].wait(timeout=timeout)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # one a test left stopped
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in self.log_files:
            f.close()
        if self.backend == "postgres-redis":
            try:
                self._admin(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{self.db_name}'"
                )
                self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}"')
            except Exception:
                if self.pg_admin == PG_ADMIN:
                    raise  # a private server goes with its folder

    # -- helpers ---------------------------------------------------------------------------
    def _template(self) -> str:
        """The name of a database on the machine's server migrated to this checkout's
        migrations (named by their digest, so a changed migration gets a new one), made once:
        migrated under a name of its own, then renamed, so a half-made one is never used."""
        digest = hashlib.sha256()
        for path in sorted(ROOT.glob("controlplane/*/migrations/*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        name = f"lw_e2e_template_{digest.hexdigest()[:16]}"
        import psycopg

        with psycopg.connect(self.pg_admin, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if found:
            return name
        building = f"{name}_{secrets.token_hex(4)}"
        self._admin(f'CREATE DATABASE "{building}"')
        try:
            migrate_env = {**self.env, "DATABASE_URL": self.env["DATABASE_URL"].rsplit("/", 1)[0]}
            migrate_env["DATABASE_URL"] += f"/{building}"
            out = subprocess.run(
                [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
                cwd=ROOT,
                env=migrate_env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if out.returncode != 0:
                raise RuntimeError(f"migrating the template failed: {out.stderr[-3000:]}")
            self._admin(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        except Exception:
            self._admin(f'DROP DATABASE IF EXISTS "{building}"')
            with psycopg.connect(self.pg_admin, autocommit=True) as conn:
                raced = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                if raced.fetchone() is None:
                    raise
        return name

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.pg_admin, autocommit=True) as conn:
            conn.execute(sql)

    def manage(self, *args: str) -> str:
        """Run a management command against this stack's database; its stdout."""
        return self._manage(*args)

    def role_key(self, who: str) -> str:
        """An API key that acts as ``who``'s session role (what the official tinker SDK uses)."""
        return self._manage(
            "create_api_key", "--account", self.accounts[who], "--role", "LoopwrightSessionRole"
        ).strip()

    def _manage(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed: {out.stderr[-3000:]}")
        return out.stdout

    def _spawn(
        self, name: str, cmd, *, group: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log = open(self.data_dir / f"{name}.log", "ab")  # noqa: SIM115 (closed in stop())
        self.log_files.append(log)
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.env | (env or {}),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=group,
        )
        self.procs.append(proc)
        return proc

    def _wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in [self.http_proc, *self.worker_procs.values()]:
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"{p.args[:3]} exited: {self.logs()}")
            try:
                r = httpx.get(
                    f"{self.url}/api/v1/base_models",
                    headers={"X-API-Key": self.keys["alice"]},
                    timeout=5,
                )
                models = r.json()["base_models"] if r.status_code == 200 else []
                if any(m["name"] == self.ready_model for m in models):
                    return  # the worker registers once it consumes its queue
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"stack did not come up: {self.logs()}")

    def _worker_logs(self) -> list[str]:
        return ["worker", *(f"worker-{name}" for name in list(self.workers)[1:])]

    def logs(self) -> str:
        parts = []
        for name in ("http", *self._worker_logs()):
            path = self.data_dir / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name} ---\n" + path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)


class ServeStack(Stack):
    """The service as ``make serve`` starts it: ``python manage.py serve`` on the embedded
    default (SQLite, filesystem broker) with no secret in its environment, so it makes its own
    in its data folder; alice is the local account it makes, charlie a tenant added beside it.
    Every process's output (gunicorn's access log included) is in ``serve.log``."""

    UNSET = ("DJANGO_SECRET_KEY", "LOOPWRIGHT_KMS_MASTER_KEY", "LOOPWRIGHT_METRICS_TOKEN")

    def __init__(self, data_dir: Path, *, env: dict[str, str] | None = None) -> None:
        super().__init__("embedded", data_dir, env=env)
        for name in (*self.UNSET, "DJANGO_SECRET_KEY_FALLBACKS", "DJANGO_DEBUG"):
            self.env.pop(name, None)

    def start(self) -> ServeStack:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.http_proc = self._spawn(
                "serve",
                [sys.executable, "manage.py", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--base-model", TINY, "--threads", "16"],
                group=True,
            )  # fmt: skip
            key_file, role_file = self.data_dir / "api-key", self.data_dir / "role-arn"
            deadline = time.monotonic() + 120
            while not (key_file.exists() and role_file.exists()):
                if self.http_proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"manage.py serve did not start: {self.logs()}")
                time.sleep(0.2)
            self.keys["alice"] = key_file.read_text().strip()
            self.roles["alice"] = role_file.read_text().strip()
            self.accounts["alice"] = self.roles["alice"].split(":")[4]
            account = json.loads(self._manage("create_tenant", "--name", "charlie", "--json"))
            self.keys["charlie"], self.roles["charlie"] = (
                account["api_key"],
                account["session_role_arn"],
            )
            self.accounts["charlie"] = account["account_id"]
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.http_proc is not None and self.http_proc.poll() is None:
            self.http_proc.send_signal(signal.SIGTERM)  # serve stops its children itself
            try:
                self.http_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.http_proc.pid, signal.SIGKILL)
        super().stop()

    def logs(self) -> str:
        path = self.data_dir / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""
