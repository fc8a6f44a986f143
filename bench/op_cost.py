"""What one operation costs in CPU outside the model: N operations of each kind through a whole
stack of its own (gunicorn, PostgreSQL and Redis servers of its own, one Celery worker on the
tiny model), from several sessions at once; per operation, the CPU milliseconds of each process
(client, web, PostgreSQL, Redis, the worker outside the engine, the engine), the SQL statements
sent (the foreign-key checks the server runs at commit apart), transactions, Redis commands and
HTTP requests.

    python -m bench.op_cost [--n 160] [--sessions 8] [--top 12] [--kinds ...]

Kinds: ``forward_backward`` (1 × 32 tokens), ``optim_step``, ``training_step`` (a
forward_backward then an optim_step that applies its gradients, counted as one),
``sample`` (4 × 16 tokens of the base model), ``retrieve_future`` (of a done operation).

CPU comes from the processes' own accounting: utime + stime (+ the times of their children
that ended) in /proc/<pid>/stat for each process tree, and for the engine the worker's
``loopwright_worker_engine_cpu_seconds`` (process time inside engine calls, ``workers/engine_cpu.py``).
The client is this process (``time.process_time``). Statements from ``pg_stat_statements``
(the private server preloads it), transactions from ``pg_stat_database``, Redis commands from
``INFO commandstats``, HTTP requests from the control plane's ``loopwright_http_requests``.
Each snapshot is taken so that reading the counters costs none of the measured processes'
time inside a phase. ``machine`` is every core's busy time over the phase: what the other
processes on the machine took is ``machine`` minus the sum.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
import psycopg
import redis
from prometheus_client.parser import text_string_to_metric_families

from loopwright import ServiceClient
from loopwright.types import AdamParams, ModelInput, SamplingParams
from tests.e2e.chaos import PrivatePostgres, PrivateRedis
from tests.e2e.stack import TINY, Stack, free_port

from .report import parse_with_quick
from .scheduler_bench import Workload, batch

# the scheduler benchmark's operations (the sizes its targets are for)
WORK = Workload(steps=0, datums=1, tokens=32, samples=0, sample_tokens=16)
# ``training_step``: a forward_backward then an optim_step of the same session, counted as one
# (a pair; the optim_step phase alone has gradients to apply only at each session's first step,
# so its row is a step's request, and the pair less forward_backward is a step with its update)
KINDS = ("forward_backward", "optim_step", "training_step", "sample", "retrieve_future")
PROCESSES = ("client", "web", "postgres", "redis", "worker", "engine")
TICK = os.sysconf("SC_CLK_TCK")


def tree_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every live descendant, with the children each has reaped
    (utime + stime + cutime + cstime of every live process of the tree)."""
    parents: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile: its time is its parent's now
        fields = stat[stat.rindex(b")") + 2 :].split()
        pid = int(entry.name)
        parents.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(x) for x in fields[11:15]) / TICK
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += parents.get(pid, [])
    return total


def machine_busy() -> float:
    """Busy CPU seconds of every core since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return (sum(cpu[:8]) - cpu[3] - cpu[4]) / TICK


def scrape(url: str, token: str | None = None) -> dict[tuple[str, tuple], float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    text = httpx.get(url, headers=headers, timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@dataclass
class Snapshot:
    cpu: dict[str, float] = field(default_factory=dict)
    statements: Counter = field(default_factory=Counter)  # query text -> calls
    transactions: float = 0.0
    redis_commands: float = 0.0
    http: Counter = field(default_factory=Counter)  # route -> requests
    wall: float = 0.0


class Accounts:
    """Reads every counter of one stack (``PrivatePostgres`` and ``PrivateRedis`` its servers)."""

    def __init__(self, stack: Stack, pg: PrivatePostgres, rds: PrivateRedis, token: str) -> None:
        self.stack, self.pg, self.token = stack, pg, token
        self.worker_port = stack.env["LOOPWRIGHT_WORKER_METRICS_PORT"]
        self.redis = redis.Redis(port=rds.port)
        self.pids = {
            "web": stack.http_proc.pid,
            "postgres": int((pg.data / "postmaster.pid").read_text().split()[0]),
            "redis": rds.proc.pid,
            "worker": next(iter(stack.worker_procs.values())).pid,
        }

    def _metrics(self, snap: Snapshot) -> None:
        web = scrape(f"{self.stack.url}/metrics", self.token)
        for (name, labels), value in web.items():
            route = dict(labels).get("route", "")
            if name == "loopwright_http_requests_total" and "metrics" not in route:
                snap.http[route] += value
        worker = scrape(f"http://127.0.0.1:{self.worker_port}/metrics")
        snap.cpu["engine"] = sum(
            v for (n, _), v in worker.items() if n == "loopwright_worker_engine_cpu_seconds_total"
        )

    def _database(self, snap: Snapshot) -> None:
        time.sleep(0.6)  # pg_stat_database is flushed by the backends at most once a 0.5 s
        with psycopg.connect(self.pg.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT query, calls FROM pg_stat_statements s JOIN pg_database d "
                "ON d.oid = s.dbid WHERE d.datname = %s",
                [self.stack.db_name],
            ).fetchall()
            for query, calls in rows:
                snap.statements[query] += calls
            (snap.transactions,) = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                [self.stack.db_name],
            ).fetchone()
        stats = self.redis.info("commandstats")
        snap.redis_commands = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")

    def _processes(self, snap: Snapshot) -> None:
        for name, pid in self.pids.items():
            snap.cpu[name] = tree_seconds(pid)
        snap.cpu["client"] = time.process_time()
        snap.cpu["machine"] = machine_busy()
        snap.wall = time.perf_counter()

    def before(self) -> Snapshot:
        """Read before a phase: the reads that cost the stack's processes time come first."""
        snap = Snapshot()
        self._metrics(snap)
        self._database(snap)
        self._processes(snap)
        return snap

    def after(self) -> Snapshot:
        snap = Snapshot()
        self._processes(snap)
        self._database(snap)
        self._metrics(snap)
        return snap


@dataclass
class Cost:
    """One phase's counts per operation."""

    kind: str
    n: int
    seconds: float
    cpu_ms: dict[str, float]
    statements: float
    fk_checks: float
    transactions: float
    redis_commands: float
    http: dict[str, float]
    top: list[tuple[float, str]]


def is_fk_check(query: str) -> bool:
    """A foreign key's check, run by the server at commit (deferred constraints): no round
    trip of its own."""
    return query.startswith("SELECT $2 FROM ONLY") and query.endswith("FOR KEY SHARE OF x")


def cost(kind: str, n: int, a: Snapshot, b: Snapshot) -> Cost:
    cpu = {k: 1000 * (b.cpu[k] - a.cpu[k]) / n for k in b.cpu}
    cpu["worker"] -= cpu["engine"]  # the worker's own: outside the engine calls
    per_query = b.statements - a.statements
    return Cost(
        kind=kind,
        n=n,
        seconds=b.wall - a.wall,
        cpu_ms=cpu,
        statements=sum(c for q, c in per_query.items() if not is_fk_check(q)) / n,
        fk_checks=sum(c for q, c in per_query.items() if is_fk_check(q)) / n,
        transactions=(b.transactions - a.transactions) / n,
        redis_commands=(b.redis_commands - a.redis_commands) / n,
        http={r: c / n for r, c in (b.http - a.http).items()},
        top=sorted(((c / n, q) for q, c in per_query.items()), reverse=True),
    )


class Sessions:
    """``count`` users' training and sampling clients on one stack."""

    def __init__(self, stack: Stack, count: int) -> None:
        self.stack = stack
        self.services = [
            ServiceClient(base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"])
            for _ in range(count)
        ]  # fmt: skip
        self.trainers = [
            svc.create_lora_training_client(TINY, rank=8, seed=i)
            for i, svc in enumerate(self.services)
        ]
        self.samplers = [svc.create_sampling_client(base_model=TINY) for svc in self.services]
        self.request_ids: list[str] = []  # done operations, for retrieve_future
        self.http = httpx.Client(
            base_url=f"{stack.url}/api/v1/", headers={"X-API-Key": stack.keys["alice"]}
        )

    def op(self, kind: str, who: int, step: int) -> None:
        tc = self.trainers[who]
        if kind == "forward_backward":
            future = tc.forward_backward(batch(who, step, WORK), "cross_entropy")
        elif kind == "optim_step":
            future = tc.optim_step(AdamParams(learning_rate=1e-3))
        elif kind == "training_step":
            tc.forward_backward(batch(who, step, WORK), "cross_entropy").result()
            future = tc.optim_step(AdamParams(learning_rate=1e-3))
        elif kind == "sample":
            prompt = ModelInput.from_ints([1, 2, 3, (who + step) % 200])
            params = SamplingParams(max_tokens=WORK.sample_tokens, seed=step, stop=[])
            future = self.samplers[who].sample(prompt, 4, params)
        else:
            rid = self.request_ids[(who * 7919 + step) % len(self.request_ids)]
            r = self.http.post("retrieve_future", json={"request_id": rid})
            r.raise_for_status()
            return
        future.result()

    def run(self, kind: str, n: int) -> None:
        """``n`` operations of ``kind``, spread over the sessions, each session's one after
        another (as a user's loop submits them)."""
        errors: list[BaseException] = []

        def loop(who: int) -> None:
            try:
                for step in range(who, n, len(self.trainers)):
                    self.op(kind, who, step)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(self.trainers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def close(self) -> None:
        self.http.close()
        for svc in self.services:
            svc.close()


def done_operations(server: str, db_name: str) -> list[str]:
    with psycopg.connect(f"{server.rsplit('/', 1)[0]}/{db_name}") as conn:
        rows = conn.execute(
            "SELECT id FROM training_sessions_operation WHERE status = 'done' "
            "AND kind IN ('forward_backward', 'optim_step', 'sample')"
        ).fetchall()
    return [r[0] for r in rows]


def measure(
    n: int,
    sessions: int,
    kinds: tuple[str, ...] = KINDS,
    threads: int | None = None,
    warmup: int = 2,
) -> list[Cost]:
    """Each kind's ``n`` operations on a stack of its own, one phase per kind; ``threads``:
    OMP_NUM_THREADS of the stack's processes (None: torch's default)."""
    pg, rds = PrivatePostgres(), PrivateRedis()
    with open(pg.data / "postgresql.conf", "a") as conf:
        conf.write("\nshared_preload_libraries = 'pg_stat_statements'\n")
        conf.write("pg_stat_statements.max = 10000\n")
    pg.start()
    rds.start()
    token = secrets.token_urlsafe(24)
    env = {
        "LOOPWRIGHT_BROKER_URL": rds.url,
        "LOOPWRIGHT_MAX_CONCURRENT_SESSIONS": "1000",
        "LOOPWRIGHT_WORKER_METRICS_PORT": str(free_port()),
        "LOOPWRIGHT_METRICS_TOKEN": token,
    }
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    folder = Path(tempfile.mkdtemp(prefix="lw-opcost-"))
    stack = Stack("postgres-redis", folder, {"opcost0": []}, env=env, pg_admin=pg.url)
    try:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        stack.start()
        accounts = Accounts(stack, pg, rds, token)
        users = Sessions(stack, sessions)
        try:
            out = []
            for kind in kinds:
                if kind == "retrieve_future":
                    users.request_ids = done_operations(pg.url, stack.db_name)
                    if not users.request_ids:  # the only phase: some operations to retrieve
                        users.run("optim_step", sessions)
                        users.request_ids = done_operations(pg.url, stack.db_name)
                users.run(kind, warmup * sessions)
                print(f"op_cost: {kind} x{n}", file=sys.stderr, flush=True)
                a = accounts.before()
                users.run(kind, n)
                out.append(cost(kind, n, a, accounts.after()))
            return out
        finally:
            users.close()
    finally:
        stack.stop()
        rds.kill()
        pg.stop("immediate")
        pg.remove()
        shutil.rmtree(folder, ignore_errors=True)


def table(costs: list[Cost]) -> str:
    cols = [*PROCESSES, "sum", "machine"]
    lines = [f"{'CPU ms per operation':<18}" + "".join(f"{c:>9}" for c in cols)]
    for c in costs:
        total = sum(c.cpu_ms[p] for p in PROCESSES)
        row = [c.cpu_ms[p] for p in PROCESSES] + [total, c.cpu_ms["machine"]]
        lines.append(f"{c.kind:<18}" + "".join(f"{v:9.2f}" for v in row))
    lines.append("")
    lines.append(
        f"{'per operation':<18}{'ops/s':>9}{'SQL':>9}{'FK chk':>9}{'xacts':>9}{'redis':>9}"
        f"{'HTTP':>9}"
        "  HTTP requests by route"
    )
    for c in costs:
        routes = ", ".join(f"{r or '?'} {v:.2f}" for r, v in sorted(c.http.items()) if v)
        lines.append(
            f"{c.kind:<18}{c.n / c.seconds:9.1f}{c.statements:9.2f}{c.fk_checks:9.2f}"
            f"{c.transactions:9.2f}"
            f"{c.redis_commands:9.2f}{sum(c.http.values()):9.2f}  {routes}"
        )
    return "\n".join(lines)


def statements(costs: list[Cost], top: int) -> str:
    lines = []
    for c in costs:
        lines.append(f"\n{c.kind}: the {top} most frequent statements, calls per operation")
        for calls, query in c.top[:top]:
            lines.append(f"  {calls:6.2f}  {' '.join(query.split())[:150]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=160, help="operations of each kind")
    p.add_argument("--sessions", type=int, default=8, help="sessions submitting at once")
    p.add_argument("--top", type=int, default=0, help="list each kind's most frequent statements")
    p.add_argument("--kinds", default=",".join(KINDS), help="these kinds only (comma-separated)")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every process of the stack")
    args = parse_with_quick(p, argv, {"n": 8, "sessions": 2})
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        p.error(f"--kinds: not a kind here: {sorted(unknown)}; one of {list(KINDS)}")
    costs = measure(args.n, args.sessions, kinds, args.threads)
    print(
        f"\nCPU per operation, {args.n} of each kind from {args.sessions} sessions at once, "
        f"tiny model (forward_backward: {WORK.datums} × {WORK.tokens} tokens; sample: 4 × "
        f"{WORK.sample_tokens} tokens of the base model; training_step: a forward_backward and the "
        f"optim_step applying it, as one; retrieve_future: of a done operation), "
        f"one worker (threads {args.threads or 'default'}), {os.cpu_count()} cores"
    )
    print(table(costs))
    if args.top:
        print(statements(costs, args.top))


if __name__ == "__main__":
    main()
