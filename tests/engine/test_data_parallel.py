"""A 2-rank data-parallel session equals one host running the same requests.

Real processes (spawn, gloo, a rendezvous file in tmp_path), the tiny model, one session: the
coordinator's losses, per-datum logprobs, gradients and AdamW-updated weights match a single
host within float32 tolerance (1e-5 relative, ``ranks.assert_close``) over several steps; the
followers' state equals the coordinator's bit for bit (``check_replicas``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine import snapshots
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.distributed import DataParallel, RankGroup, split_by_tokens
from workers.engine.errors import InvalidInput
from workers.engine.host import HostConfig, ModelHost
from workers.engine.sampler import SampleJob

from . import ranks
from .reference import randomize_adapter

ADAM = AdamParams(learning_rate=1e-2, weight_decay=0.01)
LORA = AdapterConfig(rank=4, alpha=8)
# (lengths, loss): 5 datums, then the uneven splits 3 datums / 2 ranks and 1 datum / 2 ranks.
STEPS = [
    ([23, 7, 15, 31, 4], "cross_entropy"),
    ([12, 40, 9], "importance_sampling"),
    ([17], "cross_entropy"),
]


def batches() -> list[ForwardBackwardInput]:
    rng = np.random.default_rng(7)
    return [
        ForwardBackwardInput(data=[ranks.datum(rng, n, loss) for n in lengths], loss_fn=loss)
        for lengths, loss in STEPS
    ]


def poisoned() -> ForwardBackwardInput:
    """Datum 2's loss is not finite (exp(p - q) overflows), whichever rank it lands on."""
    rng = np.random.default_rng(3)
    data = [ranks.datum(rng, n, "importance_sampling") for n in (6, 9, 5)]
    inputs = {k: v.to_numpy().tolist() for k, v in data[2].loss_fn_inputs.items()}
    inputs["logprobs"] = [-1e4] * len(inputs["logprobs"])
    data[2] = Datum(model_input=data[2].model_input, loss_fn_inputs=inputs)
    return ForwardBackwardInput(data=data, loss_fn="importance_sampling")


PROMPT = [257, *b"the cat"]


def session(host, run, checkpoint: Path, save_to: Path) -> dict:
    """The script both sides run: ``run`` is a ModelHost or the coordinator's DataParallel."""
    record: dict = {"steps": []}
    run.create_adapter("m", LORA)
    run.load_state("m", checkpoint, optimizer=False)
    for fwd in batches():
        out = run.forward_backward("m", fwd)
        step = {"out": ranks.outputs(out), **ranks.adapter_tensors(host, "m")}
        if isinstance(run, DataParallel):
            step["digest_after_backward"] = run.check_replicas("m")
        run.optim_step("m", ADAM)
        step["updated"] = ranks.adapter_tensors(host, "m")["weights"]
        if isinstance(run, DataParallel):
            step["digest_after_step"] = run.check_replicas("m")
        record["steps"].append(step)
    good = batches()[0]
    run.forward_backward("m", good)
    before = ranks.adapter_tensors(host, "m")["grads"]
    digest = run.check_replicas("m") if isinstance(run, DataParallel) else None
    try:
        run.forward_backward("m", poisoned())
    except InvalidInput as exc:
        record["poisoned"] = exc.field
    record["rolled_back"] = all(
        torch.equal(before[k], g) for k, g in ranks.adapter_tensors(host, "m")["grads"].items()
    )
    if isinstance(run, DataParallel):
        record["digest_unchanged"] = run.check_replicas("m") == digest
        try:
            bad = good.model_copy(
                update={
                    "data": [
                        good.data[0].model_copy(update={"model_input": ModelInput.from_ints([999])})
                    ]
                }
            )
            run.forward_backward("m", bad)
        except InvalidInput as exc:
            record["refused"] = exc.field
    run.optim_step("m", ADAM)
    record["after_failure"] = ranks.adapter_tensors(host, "m")["weights"]
    record["forward"] = ranks.outputs(run.forward("m", batches()[1]))
    (res,) = run.sample("m", [SampleJob(prompt=PROMPT, max_tokens=8, temperature=0.0)])
    record["greedy"] = res.sequences[0].tokens
    # a failover snapshot taken with pending gradients, restored after a step moved on
    run.forward_backward("m", batches()[2])
    snapshot = save_to.with_name(save_to.name + "-snapshot")
    snapshots.write(host.capture("m"), snapshot)
    run.optim_step("m", ADAM)
    run.restore("m", snapshot)
    if isinstance(run, DataParallel):
        run.check_replicas("m")  # raises unless every rank got weights, moments and gradients
    run.optim_step("m", ADAM)
    record["restored"] = ranks.adapter_tensors(host, "m")["weights"]
    run.save_state("m", save_to)
    return record


_RECEIVED: list = []


class _Recording(RankGroup):
    """The group as a follower sees it, keeping every broadcast it receives."""

    def broadcast(self, obj=None):
        got = super().broadcast(obj)
        _RECEIVED.append(got)
        return got


def _program(rank, world, rendezvous, cache_dir, work, checkpoint) -> None:
    host, group = ranks.join(rank, world, rendezvous, cache_dir, work)
    try:
        if rank == 0:
            dp = DataParallel(host, group)
            record = session(host, dp, checkpoint, work / "saved-dp")
            dp.stop()
            torch.save(record, work / "coordinator.pt")
        else:
            recording = _Recording(group.rank, group.world_size, group.device, group.backend)
            DataParallel(host, recording).serve()
            headers = [h for h in _RECEIVED if isinstance(h, tuple) and isinstance(h[0], str)]
            torch.save([(op, sorted(args)) for op, args in headers], work / "headers.pt")
    finally:
        group.close()


@pytest.fixture(scope="module")
def runs(tiny_catalog: ModelCatalog, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("dp")
    host = ModelHost(TINY_MODEL, HostConfig(spill_dir=work / "spill-ref"), tiny_catalog)
    host.create_adapter("m", LORA)
    randomize_adapter(host, "m", seed=11)
    host.save_state("m", work / "start", optimizer=False)
    host.remove_adapter("m")
    ranks.spawn(_program, 2, work, tiny_catalog.cache_dir, work, work / "start")
    ours = torch.load(work / "coordinator.pt", weights_only=False)
    ours["headers"] = torch.load(work / "headers.pt", weights_only=False)
    reference = session(host, host, work / "start", work / "saved-ref")
    return ours, reference, work


def test_split_is_balanced_whole_and_deterministic() -> None:
    lengths = [23, 7, 15, 31, 4]
    shares = split_by_tokens(lengths, 2)
    assert sorted(i for s in shares for i in s) == list(range(5))
    loads = [sum(lengths[i] for i in s) for s in shares]
    assert max(loads) - min(loads) <= max(lengths)
    assert shares == split_by_tokens(lengths, 2) == [[1, 3, 4], [0, 2]]  # 42 and 38 tokens
    assert split_by_tokens([12, 40, 9], 2) == [[1], [0, 2]]
    assert split_by_tokens([17], 2) == [[0], []]  # a rank may get nothing
    assert split_by_tokens([], 3) == [[], [], []]
    with pytest.raises(ValueError):
        split_by_tokens([1], 0)


def test_losses_and_logprobs_match_one_host(runs) -> None:
    ours, ref, _ = runs
    for k, (mine, theirs) in enumerate(zip(ours["steps"], ref["steps"], strict=True)):
        a, b = mine["out"], theirs["out"]
        ranks.assert_close(a["metrics"]["loss:sum"], b["metrics"]["loss:sum"], f"step {k} loss")
        assert a["metrics"]["tokens:sum"] == b["metrics"]["tokens:sum"]
        assert len(a["logprobs"]) == len(STEPS[k][0])
        for i in range(len(b["logprobs"])):
            ranks.assert_close(a["logprobs"][i], b["logprobs"][i], f"step {k} datum {i} logprobs")
            ranks.assert_close(a["losses"][i], b["losses"][i], f"step {k} datum {i} loss")
    for i, (x, y) in enumerate(
        zip(ours["forward"]["logprobs"], ref["forward"]["logprobs"], strict=True)
    ):
        ranks.assert_close(x, y, f"forward datum {i}")


def test_gradients_and_adam_updates_match_one_host_on_every_rank(runs) -> None:
    ours, ref, _ = runs
    for k, (mine, theirs) in enumerate(zip(ours["steps"], ref["steps"], strict=True)):
        assert set(mine["grads"]) == set(theirs["grads"]) and theirs["grads"]
        for name, grad in theirs["grads"].items():
            ranks.assert_close(mine["grads"][name], grad, f"step {k} grad {name}")
        for name, weight in theirs["updated"].items():
            ranks.assert_close(mine["updated"][name], weight, f"step {k} weight {name}")
        # the follower's gradients and weights equal the coordinator's bit for bit
        assert mine["digest_after_backward"] != mine["digest_after_step"]
    for name, weight in ref["after_failure"].items():
        ranks.assert_close(ours["after_failure"][name], weight, f"final weight {name}")
    for name, weight in ref["restored"].items():
        ranks.assert_close(ours["restored"][name], weight, f"step after restore {name}")


def test_headers_carry_no_datums(runs) -> None:
    """Each rank receives its own share (scatter); the header every rank gets is small."""
    ours, _, _ = runs
    passes = [keys for op, keys in ours["headers"] if op == "pass"]
    assert (
        len(passes) == 3 + 3 + 1
    )  # forward_backward ×(3 steps, good, poisoned, snapshot), forward
    assert all(keys == ["backward", "model_id", "n"] for keys in passes)
    ops = [op for op, _ in ours["headers"]]
    assert ops[:2] == ["create_adapter", "load_state"] and ops[-1] == "stop"
    assert "save_state" not in ops and "sample" not in ops  # the coordinator's alone


def test_a_failed_share_rolls_every_rank_back(runs) -> None:
    ours, ref, _ = runs
    assert ours["poisoned"] == ref["poisoned"] == "data[2]"  # the request's index, not the share's
    assert ours["rolled_back"] and ref["rolled_back"]
    assert ours["digest_unchanged"]
    assert ours["refused"] == "data[0].model_input"  # refused on the coordinator; nothing sent


def test_sampling_and_save_on_the_coordinator(runs, tiny_catalog) -> None:
    ours, ref, work = runs
    assert ours["greedy"] == ref["greedy"] and len(ref["greedy"]) == 8
    host = ModelHost(TINY_MODEL, HostConfig(spill_dir=work / "spill-check"), tiny_catalog)
    host.load_adapter_from("m", work / "saved-dp")
    for name, weight in ref["restored"].items():
        ranks.assert_close(host.pool.parameters("m")[name].detach(), weight, f"saved {name}")


def test_a_group_of_one_through_a_store_is_the_host(make_host, tmp_path: Path) -> None:
    """A rendezvous given as a Store; one rank: the coordinator alone, no follower to serve."""
    with pytest.raises(ValueError, match="rank 2"):
        RankGroup.join(dist.FileStore(str(tmp_path / "unused"), 2), rank=2, world_size=2)
    alone, host = make_host(), make_host()
    group = RankGroup.join(dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        dp = DataParallel(host, group)
        with pytest.raises(RuntimeError, match="followers"):
            dp.serve()
        fwd = batches()[0]
        for run in (dp, alone):
            run.create_adapter("m", AdapterConfig(rank=4, seed=5))
        ours, ref = dp.forward_backward("m", fwd), alone.forward_backward("m", fwd)
        assert ours.metrics == ref.metrics
        dp.optim_step("m", ADAM)
        alone.optim_step("m", ADAM)
        for name, p in alone.pool.parameters("m").items():
            assert torch.equal(host.pool.parameters("m")[name], p), name
        dp.ping()
        dp.stop()
    finally:
        group.close()
    assert not dist.is_initialized()
