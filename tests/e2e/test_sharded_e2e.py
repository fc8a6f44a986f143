"""A base sharded over two real worker processes: each is told it has less memory than holding
the tiny base whole needs (``--memory``, between a whole rank's need and a half-sharded rank's,
by the same arithmetic the workers use), so each registers ``shard_ranks`` 2 and placement
puts the session on a sharded group of both: each rank keeps half of the frozen base (FSDP2
over gloo), the LoRA adapter is whole on each.

The seeded loop of the fault tests (forward_backward of 16 datums + optim_step, a state save
and seeded samples of saved sampler weights every fourth step) runs there, together with a
sampler on the base model (prompt logprobs) and a completion through ``/v1`` with the real
``openai`` client; then a worker that holds the base whole starts, and the same loop runs on it
(placement prefers a whole worker). The sharded run's losses and final adapter and AdamW state
equal the whole worker's within float32 slack, the samples are the same tokens, and the usage
is the same (tokens are billed once per operation, not per rank). Before that worker starts,
the loop runs on the group once more and rank 1 is killed (SIGKILL) after three steps: with no
other pair of workers that shard the base, the model waits; the whole worker starts and the
model moves there, restored from its recovery point, and the loop goes on as if nothing happened.
"""

from __future__ import annotations

import pytest
from openai import OpenAI

from workers.base_fit import rank_need
from workers.engine.catalog import default_catalog
from workers.engine.distributed.placement import MIN_PASS_TOKENS
from workers.engine.host import HostConfig

from .chaos import database
from .seeded_loop import STEPS, download_final, train_step
from .stack import TINY, Stack
from .test_failover_e2e import client, recoveries, state_of, usage
from .test_replicas_e2e import ENV, Run, assert_close, group_size, run_loop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHARDING = ("sa", "sb")
WHOLE = "wc"
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]


def sharding_memory() -> int:
    """Less than one worker needs to hold the tiny base whole, even with small passes; enough
    for half of it."""
    path = default_catalog().materialize(TINY).path
    # with the smallest passes a worker makes before it shards instead
    whole, half = (rank_need(path, TINY, HostConfig(), n, MIN_PASS_TOKENS) for n in (1, 2))
    assert half < whole
    return (whole + half) // 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    memory = str(sharding_memory())
    stack = Stack(
        "postgres-redis",
        tmp_path_factory.mktemp("sharded"),
        workers={name: ["--memory", memory] for name in SHARDING},
        env=ENV,
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


def extras(stack: Stack) -> dict:
    """What a session on the base samples besides the loop: prompt logprobs and a completion."""
    openai = OpenAI(
        base_url=f"{stack.url}/v1", api_key=stack.keys["alice"], max_retries=0, timeout=120
    )
    with client(stack) as svc:
        base = svc.create_sampling_client(base_model=TINY)
        logprobs = base.compute_logprobs(PROMPT).result()
        done = openai.completions.create(
            model=base.sampling_session_id, prompt="loop", max_tokens=12, seed=5
        )
    return {"logprobs": logprobs, "completion": done.choices[0].text}


@pytest.fixture(scope="module")
def sharded(stack, tmp_path_factory) -> tuple[Run, dict]:
    return run_loop(stack, tmp_path_factory.mktemp("sharded-run"), replicas=1), extras(stack)


@pytest.fixture(scope="module")
def moved(stack, sharded, tmp_path_factory) -> Run:
    """The loop again on the sharded group, rank 1 killed (SIGKILL) after three steps: with no
    other pair of workers that shard the base, the model waits; a worker that holds the base
    whole starts, and the model moves there, restored from its recovery point."""
    losses, ranks = [], set()
    with client(stack) as svc:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=11)
        for step in range(STEPS):
            if step == 3:
                follower = rank_of(stack, tc.model_id, 1)
                stack.signal_worker(follower)
                stack.wait_worker_gone(follower)
                stack.workers[WHOLE] = []
                stack.start_worker(WHOLE)
            out, _ = train_step(tc, step)
            losses.append(out.metrics["loss:sum"])
            ranks.add(group_size(stack, tc.model_id))
        folder = download_final(svc, tc, tmp_path_factory.mktemp("moved-run"))
        session_id = tc.session_id
        tc.stop()
    state = state_of(folder)
    return Run(session_id, tc.model_id, losses, [], state, usage(stack, session_id), ranks)


@pytest.fixture(scope="module")
def whole(stack, moved, tmp_path_factory) -> tuple[Run, dict]:
    """The same loop on the worker that holds the base whole (placement prefers it)."""
    assert live_whole_workers(stack) == 1
    return run_loop(stack, tmp_path_factory.mktemp("whole-run"), replicas=1), extras(stack)


def rank_of(stack: Stack, model_id: str, rank: int) -> str:
    """The worker that is ``rank`` of the group the model's worker leads."""
    with database(stack) as conn:
        return conn.execute(
            "SELECT f.name FROM training_sessions_trainingmodel m "
            "JOIN fleet_worker c ON c.id = m.worker_id "
            "JOIN fleet_worker f ON f.group_id = c.group_id AND f.rank = %s WHERE m.id = %s",
            [rank, model_id],
        ).fetchone()[0]


def live_whole_workers(stack: Stack) -> int:
    with database(stack) as conn:
        return conn.execute(
            "SELECT count(*) FROM fleet_worker WHERE state = 'active' AND shard_ranks = 1 "
            "AND lease_expires_at > now()"
        ).fetchone()[0]


def test_workers_that_cannot_hold_the_base_form_a_sharded_group(stack, sharded) -> None:
    run, _ = sharded
    assert run.ranks == {2}, "the model did not run on a ready group of 2"
    memory = sharding_memory()
    with database(stack) as conn:
        workers = conn.execute(
            "SELECT name, memory_bytes, shard_ranks FROM fleet_worker WHERE name = ANY(%s) "
            "ORDER BY name",
            [list(SHARDING)],
        ).fetchall()
        groups = conn.execute(
            "SELECT world_size, sharded FROM fleet_replicagroup ORDER BY id"
        ).fetchall()
        need = conn.execute(
            "SELECT memory_bytes FROM fleet_basemodel WHERE name = %s", [TINY]
        ).fetchone()[0]
    assert workers == [(name, memory, 2) for name in SHARDING]
    assert groups[0] == (2, True)
    path = default_catalog().materialize(TINY).path
    assert need == rank_need(path, TINY, HostConfig(), 1) > memory


def test_a_sharded_base_trains_and_samples_as_a_whole_one(sharded, whole) -> None:
    (ours, our_extras), (ref, ref_extras) = sharded, whole
    assert ref.ranks == {1}
    # Adam carries float32 summation noise forward: 1e-4 after eight steps
    assert_close(ours, ref, losses=1e-4, state=1e-3)
    assert ours.samples == ref.samples  # seeded samples of saved sampler weights
    assert ours.usage == ref.usage  # billed once per operation, not per rank
    assert our_extras["completion"] == ref_extras["completion"]
    assert our_extras["logprobs"][0] is None and len(our_extras["logprobs"]) == len(PROMPT)
    for a, b in zip(our_extras["logprobs"][1:], ref_extras["logprobs"][1:], strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)


def test_a_rank_lost_moves_the_model_to_a_worker_that_serves_it(stack, sharded, moved) -> None:
    ours, _ = sharded
    assert moved.ranks == {2, 1}  # on the group, then on the whole worker
    assert_close(moved, ours, losses=1e-4, state=1e-3)
    assert moved.usage == ours.usage  # nothing billed twice
    recovered = recoveries(stack, moved.session_id)
    assert recovered, "no recovery recorded"
    assert {r["cause"] for r in recovered} <= {"group_broken", "worker_lost"}, recovered
    assert all(r["outcome"] == "restored" for r in recovered), recovered
