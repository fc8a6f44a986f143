"""Faults against real processes: kill -9 of the worker holding the model at chosen points, a
worker killed and started again, a rolling restart of every worker, PostgreSQL and Redis
restarted, the control plane killed, a stopped worker coming back after its lease ran out.

Each test runs the same seeded training loop (our SDK: forward_backward + optim_step, a state
save and a seeded sample every fourth step) through a fault and compares it with the same loop
run without one: the loop raises nothing, the final adapter and AdamW state are equal bit for
bit (one machine, the same kernels), the sampled tokens are the same, and the session is
billed the same tokens.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import torch

from loopwright import ServiceClient

from .chaos import Killer, PrivatePostgres, PrivateRedis, database, holder, wait_registered
from .outcome import differences, state_of, usage
from .seeded_loop import STEPS, download_final, train_step
from .stack import TINY, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKERS = ("fa", "fb")
ENV = {
    "LOOPWRIGHT_WORKER_LEASE_SECONDS": "3",  # noticed in 3-4 s instead of 10-12
    "LOOPWRIGHT_SNAPSHOT_EVERY_STEPS": "3",
    "LOOPWRIGHT_LONG_POLL_SECONDS": "5",
}


@pytest.fixture(scope="module")
def services():
    """PostgreSQL and Redis servers of this module's own: the tests restart them."""
    pg = PrivatePostgres()
    pg.start()
    redis = PrivateRedis()
    redis.start()
    yield pg, redis
    redis.kill()
    pg.stop("immediate")
    pg.remove()


@pytest.fixture(scope="module")
def stack(services, tmp_path_factory):
    pg, redis = services
    stack = Stack(
        "postgres-redis",
        tmp_path_factory.mktemp("failover"),
        workers={name: [] for name in WORKERS},
        env={**ENV, "LOOPWRIGHT_BROKER_URL": redis.url},
        pg_admin=pg.url,
    ).start()
    for name in WORKERS:
        wait_registered(stack, name)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def reference(stack, tmp_path_factory):
    """The loop with nothing going wrong."""
    return run_loop(stack, tmp_path_factory.mktemp("reference"))


@dataclass
class Run:
    session_id: str
    model_id: str
    samples: list[list[list[int]]]
    state: dict[str, torch.Tensor]
    usage: dict[str, int]
    faults: list = field(default_factory=list)


def client(stack: Stack) -> ServiceClient:
    return ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    )


def run_loop(stack: Stack, folder: Path, fault=None) -> Run:
    """The user's loop. ``fault(model_id)`` returns the hook called at each point (a Killer's
    ``at``), or None."""
    samples = []
    with client(stack) as svc:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=11)
        at = fault(tc.model_id) if fault else (lambda *a, **k: None)
        for step in range(STEPS):
            _, sampled = train_step(tc, step, at)
            if sampled is not None:
                samples.append(sampled)
        folder = download_final(svc, tc, folder)
        session_id = tc.session_id
        tc.stop()
    return Run(session_id, tc.model_id, samples, state_of(folder), usage(stack, session_id))


def recoveries(stack: Stack, session_id: str) -> list[dict]:
    r = httpx.get(
        f"{stack.url}/api/v1/sessions/{session_id}",
        headers={"X-API-Key": stack.keys["alice"]},
        timeout=30,
    )
    return r.json()["recoveries"]


def assert_unchanged(run: Run, reference: Run) -> None:
    different = differences(run.state, reference.state)
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"
    assert run.samples == reference.samples
    assert run.usage == reference.usage


def test_kill_9_of_the_worker_holding_the_model_at_any_point(stack, reference, tmp_path) -> None:
    schedule = {("forward_backward", 1), ("between", 2), ("save", 3), ("sample", 7)}
    killer: Killer | None = None

    def fault(model_id: str):
        nonlocal killer
        killer = Killer(stack, model_id, schedule)
        return killer.at

    run = run_loop(stack, tmp_path, fault)
    killer.join()
    assert [k.worker is not None for k in killer.kills] == [True] * 4
    # armed before the operation is sent, each kill lands while it runs (or just after it)
    assert sum(k.while_running for k in killer.kills) >= 2, killer.kills
    assert_unchanged(run, reference)
    moved = recoveries(stack, run.session_id)
    assert len(moved) >= 3 and all(r["outcome"] in ("restored", "ended") for r in moved)
    assert {r["cause"] for r in moved} == {"worker_lost"}
    restored = [r for r in moved if r["outcome"] == "restored"]
    # a bound on the pause only (recovery did not hang), wide enough for a loaded machine
    assert all(r["seconds_to_recover"] < 120 for r in restored)
    print("kills:", killer.kills, "recoveries:", moved)


def test_the_only_worker_killed_and_started_again(stack, reference, tmp_path) -> None:
    """With one worker: started again at once (it declares its previous process dead as it
    registers), and started again only after its lease ran out (the control plane notices)."""
    stack.signal_worker("fb", signal.SIGTERM)  # hands its models to fa and leaves
    stack.wait_worker_gone("fb")
    killer: Killer | None = None
    late = threading.Event()

    def fault(model_id: str):
        nonlocal killer
        killer = Killer(stack, model_id, {("forward_backward", 2)}, at_once=True)

        def at(point, step, **kw):
            killer.at(point, step, **kw)
            if (point, step) == ("between", 5):  # down past its lease this time
                threading.Thread(target=kill_and_wait, args=(model_id,)).start()

        return at

    def kill_and_wait(model_id: str) -> None:
        stack.signal_worker("fa", signal.SIGKILL)
        stack.wait_worker_gone("fa")
        with database(stack) as conn:
            deadline = time.monotonic() + 30
            while holder(conn, model_id) is not None and time.monotonic() < deadline:
                time.sleep(0.2)  # until someone notices and the model waits for a worker
            assert holder(conn, model_id) is None
        stack.start_worker("fa")
        late.set()

    try:
        run = run_loop(stack, tmp_path, fault)
        killer.join()
        assert late.wait(60)
    finally:
        stack.start_worker("fb")
        wait_registered(stack, "fb")
    assert_unchanged(run, reference)
    causes = [(r["cause"], r["declared_by"]) for r in recoveries(stack, run.session_id)]
    assert len(causes) == 2, causes  # each death noticed once
    # Started again at once, its registration declares its previous process dead, unless the
    # control plane's look got there first: starting a worker can take longer than the 3 s
    # lease. (The restart's own declaration is tested in tests/controlplane/training_sessions/test_vpc_placement.)
    noticed = [c == "worker_lost" and by.startswith("control plane") for c, by in causes]
    assert all(
        n or c == ("worker_restarted", "worker fa") for n, c in zip(noticed, causes, strict=True)
    )
    assert any(noticed)  # down past its lease: the control plane noticed


def test_a_rolling_restart_of_every_worker_loses_nothing(stack, reference, tmp_path) -> None:
    stopped: list[str] = []

    def fault(model_id: str):
        def at(point, step, **kw):
            if point == "between" and step in (1, 4, 6):
                name = holder_name(stack, model_id)
                stack.signal_worker(name, signal.SIGTERM)
                assert stack.wait_worker_gone(name) == 0  # it exits, on its own, in time
                stack.start_worker(name)
                stopped.append(name)

        return at

    run = run_loop(stack, tmp_path, fault)
    for name in WORKERS:
        wait_registered(stack, name)
    assert len(set(stopped)) == 2  # each of them, in turn
    assert_unchanged(run, reference)
    moved = recoveries(stack, run.session_id)
    assert {r["cause"] for r in moved} == {"worker_stopped"}
    assert all(r["operations_replayed"] in (0, None) for r in moved)  # snapshotted as it left


def holder_name(stack: Stack, model_id: str) -> str:
    with database(stack) as conn:
        deadline = time.monotonic() + 30
        while (name := holder(conn, model_id)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert name is not None
    return name


class Outages:
    """Faults that run beside the loop (it goes on sending requests meanwhile)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def start(self, action) -> None:
        t = threading.Thread(target=action)
        t.start()
        self.threads.append(t)

    def join(self) -> None:
        for t in self.threads:
            t.join()


def test_postgresql_restarted_during_the_run(stack, services, reference, tmp_path) -> None:
    """A crash of PostgreSQL (immediate stop: claims not yet flushed are lost) while a step
    runs: the worker and the control plane reconnect; nothing is lost or run twice."""
    pg, _ = services
    outages = Outages()

    def restart() -> None:
        time.sleep(0.05)
        pg.stop("immediate")
        time.sleep(2)
        pg.start()

    def fault(model_id: str):
        def at(point, step, **kw):
            if (point, step) in (("forward_backward", 2), ("forward_backward", 5)):
                outages.join()
                outages.start(restart)

        return at

    run = run_loop(stack, tmp_path, fault)
    outages.join()
    assert_unchanged(run, reference)


def generations(stack: Stack) -> dict[str, int]:
    with database(stack) as conn:
        return dict(conn.execute("SELECT name, generation FROM fleet_worker").fetchall())


def test_redis_restarted_during_the_run(stack, services, reference, tmp_path) -> None:
    """The broker goes away and comes back empty: the workers' Celery consumers reconnect, a
    nudge lost with it costs a heartbeat, and nobody fails over."""
    _, redis = services
    outages = Outages()
    before = generations(stack)

    def restart() -> None:
        redis.kill()
        time.sleep(1)
        redis.start()

    def fault(model_id: str):
        def at(point, step, **kw):
            if (point, step) in (("forward_backward", 3), ("forward_backward", 6)):
                outages.join()
                outages.start(restart)

        return at

    run = run_loop(stack, tmp_path, fault)
    outages.join()
    assert_unchanged(run, reference)
    assert generations(stack) == before and not recoveries(stack, run.session_id)
    assert all(stack.worker_procs[name].poll() is None for name in WORKERS)


def test_the_control_plane_killed_in_the_middle_of_requests(stack, reference, tmp_path) -> None:
    """kill -9 of gunicorn while the SDK's requests are open (a streamed submit waits for its
    step): the SDK sends them again with the same seq_id, and each runs once."""
    outages = Outages()
    before = generations(stack)

    def restart() -> None:
        time.sleep(0.02)
        stack.kill_http()
        time.sleep(1)
        stack.start_http()

    def fault(model_id: str):
        def at(point, step, **kw):
            if (point, step) in (("forward_backward", 2), ("save", 7)):
                outages.join()
                outages.start(restart)

        return at

    run = run_loop(stack, tmp_path, fault)
    outages.join()
    assert_unchanged(run, reference)
    assert generations(stack) == before  # the workers never noticed


def test_a_stopped_worker_coming_back_after_its_lease_changes_nothing(
    stack, reference, tmp_path
) -> None:
    """SIGSTOP the worker in the middle of a forward_backward, past its lease: the other
    takes the model over; SIGCONT: its completion is refused (fenced), it drops what it held
    and registers under a new generation."""
    paused: list[str] = []
    stopped: list = []

    def fault(model_id: str):
        killer = Killer(stack, model_id, {("forward_backward", 4)}, signum=signal.SIGSTOP)

        def pause_until_taken_over(kill) -> None:  # instead of killing and starting again
            name = kill.worker
            with database(stack) as conn:
                before = conn.execute(
                    "SELECT generation FROM fleet_worker WHERE name = %s", [name]
                ).fetchone()[0]
                deadline = time.monotonic() + 30
                while holder(conn, model_id) in (name, None) and time.monotonic() < deadline:
                    time.sleep(0.1)
            stack.signal_worker(name, signal.SIGCONT)
            wait_registered(stack, name, before + 1)  # declared dead (+1), then again (+2)
            paused.append(name)

        def kill(kill_, name):
            if name is None:
                return
            kill_.worker = name
            stack.signal_worker(name, signal.SIGSTOP)
            stopped.append(kill_)
            pause_until_taken_over(kill_)

        killer._kill = kill  # type: ignore[method-assign]
        at = killer.at

        def at_and_wait(point, step, **kw):
            at(point, step, **kw)
            if point == "between":
                killer.join()

        return at_and_wait

    run = run_loop(stack, tmp_path, fault)
    assert len(paused) == 1 and stopped[0].while_running
    log = (stack.data_dir / ("worker.log" if paused[0] == "fa" else "worker-fb.log")).read_text()
    assert "lost its lease" in log
    assert_unchanged(run, reference)


def test_the_embedded_stack_survives_its_worker_killed_and_started_again(
    reference, tmp_path_factory, tmp_path
) -> None:
    """SQLite and the filesystem broker (``make serve``): its one worker killed in the middle of
    a forward_backward and started again; the loop goes on and ends as without the fault."""
    embedded = Stack("embedded", tmp_path_factory.mktemp("embedded"), env=ENV).start()
    try:
        killer: Killer | None = None

        def fault(model_id: str):
            nonlocal killer
            killer = Killer(embedded, model_id, {("forward_backward", 2)}, at_once=True)
            return killer.at

        run = run_loop(embedded, tmp_path, fault)
        killer.join()
    finally:
        embedded.stop()
    assert killer.kills[0].worker is not None
    assert_unchanged(run, reference)
