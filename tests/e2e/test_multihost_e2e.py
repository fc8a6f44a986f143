"""Loopwright across hosts: five network namespaces on a bridge of the test's own (PostgreSQL
and Redis on one, the control plane on one, a worker on each of two more, the user's loop on
the fifth), every connection over the veth links to the other host's address.

The loop runs once as it is, then again with the cable of the worker holding its model pulled
mid-run (packets vanish, nothing is refused): the other worker declares it dead, restores the
model and replays; the loop ends with the same adapter and AdamW state bit for bit, the same
samples and the same bill. Then the cable goes back: the cut-off worker learns it lost its
lease, drops what it held and registers anew.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from .chaos import PG_BIN, PrivatePostgres
from .netns import Network, available
from .stack import ROOT, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PG_PORT, REDIS_PORT, HTTP_PORT = 5432, 6379, 8000
REDIS_PASSWORD = "multihost-redis-password"  # Redis answers other hosts only with one
WORKERS = {"wa": "host-a", "wb": "host-b"}  # worker name -> its host
ENV = {
    "LOOPWRIGHT_WORKER_LEASE_SECONDS": "3",
    "LOOPWRIGHT_SNAPSHOT_EVERY_STEPS": "3",
    "LOOPWRIGHT_LONG_POLL_SECONDS": "5",
}


class MultiHostStack(Stack):
    """The e2e stack with each process started on its host and every address a host's."""

    def __init__(self, net: Network, data_dir: Path) -> None:
        db = net.hosts["db"]
        super().__init__(
            "postgres-redis",
            data_dir,
            # each announces its host's address: a replica group's ranks meet there
            workers={name: ["--address", net.hosts[host]] for name, host in WORKERS.items()},
            env={**ENV, "LOOPWRIGHT_BROKER_URL": f"redis://:{REDIS_PASSWORD}@{db}:{REDIS_PORT}/0"},
            pg_admin=f"postgresql://postgres@{db}:{PG_PORT}/postgres",
        )
        self.net = net
        self.port = HTTP_PORT
        self.url = f"http://{net.hosts['cp']}:{HTTP_PORT}"
        self.env["DATABASE_URL"] = f"postgres://postgres@{db}:{PG_PORT}/{self.db_name}"
        self.env["DJANGO_ALLOWED_HOSTS"] = net.hosts["cp"]

    def host_of(self, cmd: list[str]) -> str:
        if "workers.run" in cmd:
            return WORKERS[cmd[cmd.index("--name") + 1]]
        return "cp"

    def start_http(self) -> None:
        self.http_proc = self._spawn(
            "http",
            [sys.executable, "-m", "gunicorn", "controlplane.wsgi:application", "--bind",
             f"{self.net.hosts['cp']}:{HTTP_PORT}", "--worker-class", "gthread", "--threads",
             "16", "--timeout", "120"],
            group=True,
        )  # fmt: skip

    def _spawn(self, name: str, cmd, *, group: bool = False) -> subprocess.Popen:
        return super()._spawn(name, self.net.on(self.host_of(cmd), cmd), group=group)

    def _manage(self, *args: str) -> str:
        out = subprocess.run(
            self.net.on("cp", [sys.executable, "manage.py", *args]),
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed: {out.stderr[-3000:]}")
        return out.stdout

    def _admin(self, sql: str) -> None:
        self.sql(sql, database="postgres")

    def sql(self, sql: str, database: str | None = None) -> str:
        """A statement run by psql on the client host, over the network."""
        cmd = ["psql", "-h", self.net.hosts["db"], "-p", str(PG_PORT), "-U", "postgres",
               "-d", database or self.db_name, "-Atc", sql]  # fmt: skip
        done = subprocess.run(
            self.net.on("client", cmd), capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: {done.stderr.strip()}")
        return done.stdout.strip()

    def _wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in [self.http_proc, *self.worker_procs.values()]:
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"{p.args[:6]} exited: {self.logs()}")
            active = self.sql("SELECT count(*) FROM fleet_worker WHERE state = 'active'")
            up = subprocess.run(
                self.net.on("client", ["curl", "-sf", "-o", "/dev/null", f"{self.url}/api/v1/healthz"]),
                capture_output=True,
            ).returncode == 0  # fmt: skip
            if up and active == str(len(WORKERS)):
                return
            time.sleep(0.5)
        raise RuntimeError(f"stack did not come up: {self.logs()}")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    why = available()
    if why is not None:
        pytest.skip(why)
    net = Network().start()
    pg = redis = None
    try:
        for host in ("db", "cp", *WORKERS.values(), "client"):
            net.add(host)
        pg = PrivatePostgres()  # initdb'd in a folder the postgres user reaches
        with (pg.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all 10.231.{net.net}.0/24 trust\n")
        as_pg = ["runuser", "-u", "postgres", "--"]
        options = f"-p {PG_PORT} -k {pg.folder} -c listen_addresses={net.hosts['db']}"
        subprocess.run(net.on("db", [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(pg.data), "-o",
                                     options, "-l", str(pg.folder / "log"), "-w", "start"]),
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        redis = subprocess.Popen(
            net.on("db", ["redis-server", "--port", str(REDIS_PORT), "--bind", net.hosts["db"],
                          "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
                          "--requirepass", REDIS_PASSWORD]),
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        yield net, tmp_path_factory.mktemp("multihost")
    finally:
        if redis is not None:
            redis.kill()
            redis.wait()
        if pg is not None:
            pg.stop("immediate")
            pg.remove()
        net.stop()


@pytest.fixture(scope="module")
def stack(hosts):
    net, folder = hosts
    s = MultiHostStack(net, folder / "stack").start()
    try:
        yield s
    finally:
        s.stop()


def run_loop(stack: MultiHostStack, out: Path, on_pause=None, replicas: int = 1) -> dict:
    """The loop on the client host; ``on_pause(point, step, model_id)`` at its pauses."""
    out.mkdir(parents=True)
    pauses = ["--pause", "between:4", "--pause", "between:6"] if on_pause else []
    cmd = [sys.executable, "-m", "tests.e2e.multihost_loop", stack.url, stack.keys["alice"],
           stack.roles["alice"], str(out), *pauses, "--replicas", str(replicas)]  # fmt: skip
    lines = []
    with subprocess.Popen(
        stack.net.on("client", cmd), cwd=ROOT, env=stack.env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    ) as proc:  # fmt: skip
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("PAUSE "):
                _, point, step, model_id = line.split()
                on_pause(point, int(step), model_id)
                proc.stdin.write("go\n")
                proc.stdin.flush()
        assert proc.wait(timeout=300) == 0, "".join(lines[-60:]) + stack.logs()
    result = json.loads((out / "result.json").read_text())
    folder = Path(result["state"])
    state = {f"a/{k}": v for k, v in load_file(folder / "adapter_model.safetensors").items()}
    state |= {f"o/{k}": v for k, v in load_file(folder / "optimizer.safetensors").items()}
    result["state"] = state
    return result


def holder(stack: MultiHostStack, model_id: str) -> str:
    return stack.sql(
        "SELECT w.name FROM training_sessions_trainingmodel m "
        f"JOIN fleet_worker w ON w.id = m.worker_id WHERE m.id = '{model_id}'"
    )


@pytest.fixture(scope="module")
def reference(stack, tmp_path_factory) -> dict:
    """The loop on one worker, nothing going wrong."""
    return run_loop(stack, tmp_path_factory.mktemp("reference") / "run")


def test_a_worker_host_cut_off_mid_run_changes_nothing(stack, reference, tmp_path) -> None:
    cut: list[str] = []

    def on_pause(point: str, step: int, model_id: str) -> None:
        if step == 4:  # pull the cable of the host holding the model (after a state save)
            name = holder(stack, model_id)
            cut.append(name)
            stack.net.cut(WORKERS[name])
        else:  # the model has moved: plug it back in
            assert holder(stack, model_id) not in ("", cut[0])
            stack.net.restore(WORKERS[cut[0]])

    generation = dict(
        line.split("|") for line in stack.sql("SELECT name, generation FROM fleet_worker").split()
    )
    run = run_loop(stack, tmp_path / "cut", on_pause)

    assert run["state"].keys() == reference["state"].keys()
    different = [k for k in run["state"] if not torch.equal(run["state"][k], reference["state"][k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"
    assert run["samples"] == reference["samples"]
    assert run["usage"] == reference["usage"]
    lost = [r for r in run["recoveries"] if r["from_worker"] == cut[0]]
    assert lost and lost[-1]["cause"] == "worker_lost" and lost[-1]["outcome"] == "restored"
    assert not reference["recoveries"]
    print("cut:", cut[0], "recoveries:", run["recoveries"])

    # back on the network, the cut-off worker finds its lease gone and registers anew
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = stack.sql(f"SELECT state, generation FROM fleet_worker WHERE name = '{cut[0]}'")
        state, gen = row.split("|")
        if state == "active" and int(gen) > int(generation[cut[0]]) + 1:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"{cut[0]} did not come back: {row}\n{stack.logs()}")
    log = "worker.log" if cut[0] == "wa" else "worker-wb.log"
    assert "lost its lease" in (stack.data_dir / log).read_text()


def test_two_replicas_on_two_hosts_train_as_one_worker(stack, reference, tmp_path) -> None:
    """The model's replica group spans both worker hosts: rank 0 announces its host's address,
    the other rank reaches it over the bridge; the result is the one worker's, within float32
    summation slack, billed the same."""
    run = run_loop(stack, tmp_path / "replicas", replicas=2)
    groups = stack.sql(
        "SELECT count(*) FROM fleet_replicagroup WHERE world_size = 2 AND ready_at IS NOT NULL "
        f"AND rendezvous LIKE 'tcp://10.231.{stack.net.net}.%'"
    )
    assert int(groups) >= 1, "no group of the two hosts became ready"
    assert run["state"].keys() == reference["state"].keys()
    for key, tensor in reference["state"].items():
        scale = tensor.abs().max().item() or 1.0
        gap = (run["state"][key] - tensor).abs().max().item()
        assert gap <= 1e-4 * scale, (key, gap, scale)
    assert run["usage"] == reference["usage"]
