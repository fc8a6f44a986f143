"""Data-parallel training models against real processes: three worker processes, a model asking
for 2 replicas trains on a replica group of two of them (gloo over TCP on this host, the
rendezvous announced through the database).

The same seeded loop as the failover tests (our SDK: forward_backward of 16 datums +
optim_step, a state save and a seeded sample every fourth step) runs on one worker and on two
ranks: the losses and the final adapter and AdamW state agree within float32 summation slack,
and the session is billed the same tokens (once per operation, not per rank). Then it runs on
two ranks again while a follower, then the coordinator, is killed with SIGKILL: the group is
rebuilt with another worker from the model's recovery point, and the loop ends with the
uninterrupted two-rank run's state bit for bit, the same samples and the same bill.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from .chaos import Killer, database
from .seeded_loop import STEPS, download_final, train_step
from .stack import TINY, Stack
from .test_failover_e2e import client, recoveries, state_of, usage

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKERS = ("ra", "rb", "rc")
ENV = {
    "LOOPWRIGHT_WORKER_LEASE_SECONDS": "3",
    "LOOPWRIGHT_SNAPSHOT_EVERY_STEPS": "3",
    "LOOPWRIGHT_LONG_POLL_SECONDS": "5",
    "LOOPWRIGHT_WORKER_ADDRESS": "127.0.0.1",
    "LOOPWRIGHT_GROUP_TIMEOUT_SECONDS": "60",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = Stack(
        "postgres-redis",
        tmp_path_factory.mktemp("replicas"),
        workers={name: [] for name in WORKERS},
        env=ENV,
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


@dataclass
class Run:
    session_id: str
    model_id: str
    losses: list[float]
    samples: list[list[list[int]]]
    state: dict[str, torch.Tensor]
    usage: dict[str, int]
    ranks: set[int]  # the group sizes the model was seen on


def group_size(stack: Stack, model_id: str) -> int:
    """How many ranks the model's worker leads now (1: none, a single worker)."""
    with database(stack) as conn:
        row = conn.execute(
            "SELECT g.world_size, g.state FROM training_sessions_trainingmodel m "
            "JOIN fleet_worker w ON w.id = m.worker_id "
            "LEFT JOIN fleet_replicagroup g ON g.id = w.group_id WHERE m.id = %s",
            [model_id],
        ).fetchone()
    return row[0] if row and row[0] and row[1] == "ready" else 1


def settled_group_size(stack: Stack, model_id: str, replicas: int) -> int:
    """The size of the group the model runs on; a killer's thread may have just ended the group
    its last step ran on (the kill lands after the step), so a model of several replicas gets a
    while to be on its next group before it counts as on one worker."""
    size = group_size(stack, model_id)
    deadline = time.monotonic() + 60
    while replicas > 1 and size == 1 and time.monotonic() < deadline:
        time.sleep(0.2)
        size = group_size(stack, model_id)
    return size


def run_loop(stack: Stack, folder: Path, replicas: int, fault=None) -> Run:
    samples, losses, ranks = [], [], set()
    with client(stack) as svc:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=11, replicas=replicas)
        at = fault(tc.model_id) if fault else (lambda *a, **k: None)
        for step in range(STEPS):
            out, sampled = train_step(tc, step, at)
            losses.append(out.metrics["loss:sum"])
            ranks.add(settled_group_size(stack, tc.model_id, replicas))
            if sampled is not None:
                samples.append(sampled)
        folder = download_final(svc, tc, folder)
        session_id = tc.session_id
        tc.stop()
    state = state_of(folder)
    return Run(session_id, tc.model_id, losses, samples, state, usage(stack, session_id), ranks)


@pytest.fixture(scope="module")
def one_worker(stack, tmp_path_factory) -> Run:
    return run_loop(stack, tmp_path_factory.mktemp("one"), replicas=1)


@pytest.fixture(scope="module")
def two_ranks(stack, tmp_path_factory) -> Run:
    return run_loop(stack, tmp_path_factory.mktemp("two"), replicas=2)


def test_two_ranks_train_as_one_worker(one_worker, two_ranks) -> None:
    assert one_worker.ranks == {1}
    assert two_ranks.ranks == {2}, "the model did not run on a ready group of 2"
    # Token-sum losses: the ranks' shares add up to the whole batch's loss, in another order.
    assert_close(two_ranks, one_worker, losses=1e-5, state=1e-4)
    assert two_ranks.usage == one_worker.usage  # billed once per operation, not per rank


def assert_close(run: Run, ref: Run, *, losses: float, state: float) -> None:
    """The losses within ``losses`` (relative), every tensor of the final adapter and AdamW
    state within ``state`` of the reference tensor's largest entry."""
    for a, b in zip(run.losses, ref.losses, strict=True):
        assert a == pytest.approx(b, rel=losses)
    assert run.state.keys() == ref.state.keys()
    for key, tensor in ref.state.items():
        scale = tensor.abs().max().item() or 1.0
        gap = (run.state[key] - tensor).abs().max().item()
        assert gap <= state * scale, (key, gap, scale)


class FollowerKiller(Killer):
    """Kills rank 1 of the group the model's worker leads (the worker holding the model is rank
    0), then starts it again once the model's group was rebuilt without it."""

    def _holder(self) -> str | None:
        with database(self.stack) as conn:
            row = conn.execute(
                "SELECT f.name FROM training_sessions_trainingmodel m "
                "JOIN fleet_worker c ON c.id = m.worker_id "
                "JOIN fleet_worker f ON f.group_id = c.group_id AND f.rank = 1 "
                "WHERE m.id = %s",
                [self.model_id],
            ).fetchone()
        return row[0] if row else None

    def _kill(self, kill, name: str | None) -> None:
        super()._kill(kill, self._holder())


def test_a_rank_killed_mid_run_changes_nothing(stack, two_ranks, tmp_path) -> None:
    killers: list[Killer] = []

    def fault(model_id: str):
        killers.append(FollowerKiller(stack, model_id, {("forward_backward", 1)}))
        killers.append(Killer(stack, model_id, {("between", 5)}))

        def at(point, step, **kw):
            for killer in killers:
                killer.at(point, step, **kw)

        return at

    started = time.monotonic()
    run = run_loop(stack, tmp_path, replicas=2, fault=fault)
    for killer in killers:
        killer.join()
    assert [k.worker is not None for killer in killers for k in killer.kills] == [True, True]
    assert run.ranks == {2}
    assert run.losses == two_ranks.losses
    different = [k for k in run.state if not torch.equal(run.state[k], two_ranks.state[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"
    assert run.samples == two_ranks.samples
    assert run.usage == two_ranks.usage
    moved = recoveries(stack, run.session_id)
    causes = {r["cause"] for r in moved}
    assert "group_broken" in causes and causes <= {"group_broken", "worker_lost"}, moved
    assert all(r["outcome"] in ("restored", "ended") for r in moved), moved
    print("kills:", [k.kills for k in killers], "recoveries:", moved, time.monotonic() - started)
