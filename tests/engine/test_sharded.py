"""A base sharded over 2 ranks with FSDP2 (gloo on CPU) trains and samples like the whole model.

Each rank stores half of the frozen base; the LoRA adapter is whole on each. The gradients and
per-datum logprobs of a forward_backward equal an unsharded host's within float32 tolerance
(1e-5 relative), training lowers the loss step by step as the unsharded host does, and greedy
sampling gives the unsharded host's tokens from the same adapter state.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from loopwright.types import AdamParams, ForwardBackwardInput
from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.distributed import DataParallel, is_sharded, shard_base
from workers.engine.distributed.sharding import local_base_numel
from workers.engine.errors import InvalidInput
from workers.engine.host import HostConfig, ModelHost
from workers.engine.sampler import SampleJob

from . import ranks
from .reference import randomize_adapter
from .test_data_parallel import LORA, poisoned
from .test_training import TEXTS, sft_datum

ADAM = AdamParams(learning_rate=3e-3, grad_clip_norm=1.0)
STEPS = 6
PROMPT = [257, *b"loop"]


def probe(*lengths: int, seed: int = 5) -> ForwardBackwardInput:
    rng = np.random.default_rng(seed)
    return ForwardBackwardInput(
        data=[ranks.datum(rng, n) for n in lengths], loss_fn="cross_entropy"
    )


# (11, 29, 6): one micro-batch on each rank; (30, 12, 12, 12): one on rank 0 ([30]) and two on
# rank 1 ([12, 12], [12]) under a 32-token budget; (17,): none on rank 1, which runs an empty one.
PROBES = [(11, 29, 6), (30, 12, 12, 12), (17,)]
MAX_BATCH_TOKENS = 32


def session(host: ModelHost, run, start) -> dict:
    """What both sides run: ``run`` is an unsharded ModelHost or the sharded DataParallel."""
    run.create_adapter("m", LORA)
    run.load_state("m", start, optimizer=False)
    record: dict = {"probes": []}
    for lengths in PROBES:
        out = run.forward_backward("m", probe(*lengths))
        grads = ranks.adapter_tensors(host, "m")["grads"]
        record["probes"].append({"out": ranks.outputs(out), "grads": grads})
    try:
        run.forward_backward("m", poisoned())
    except InvalidInput as exc:
        record["poisoned"] = exc.field
    after = ranks.adapter_tensors(host, "m")["grads"]
    record["rolled_back"] = all(torch.equal(after[k], g) for k, g in grads.items())
    run.optim_step("m", ADAM)
    sft = ForwardBackwardInput(
        data=[sft_datum(host.tokenizer, t) for t in TEXTS[:2]], loss_fn="cross_entropy"
    )
    record["losses"] = []
    for _ in range(STEPS):
        record["losses"].append(run.forward_backward("m", sft).metrics["loss:sum"])
        run.optim_step("m", ADAM)
    record["base_forward"] = ranks.outputs(run.forward(None, probe(11, 29, 6)))
    (res,) = run.sample("m", [SampleJob(prompt=PROMPT, max_tokens=10, temperature=0.0)])
    record["greedy"] = res.sequences[0].tokens
    record["weights"] = ranks.adapter_tensors(host, "m")["weights"]
    # Sampler weights: saved, loaded as another adapter, sampled in one batch with the live
    # model and the base (prompt logprobs too), tokens heard as drawn.
    saved = start.parent / f"saved-{'dp' if run is not host else 'host'}"
    run.save_state("m", saved, optimizer=False)
    run.load_adapter_from("s", saved)
    heard: list = []
    greedy = SampleJob(prompt=PROMPT, max_tokens=6, temperature=0.0)
    scored = SampleJob(prompt=PROMPT, max_tokens=1, temperature=0.0, prompt_logprobs=True)
    many = run.sample_many([("m", [greedy]), ("s", [greedy]), (None, [scored])], heard.extend)
    record["many"] = [r[0].sequences[0].tokens for r in many]
    record["prompt_logprobs"] = many[2][0].prompt_logprobs
    record["heard"] = len(heard)
    record["unknown"] = type(run.sample_many([("nope", [greedy])])[0]).__name__
    return record


def _program(rank, world, rendezvous, cache_dir, work, start) -> None:
    host, group = ranks.join(
        rank, world, rendezvous, cache_dir, work, max_batch_tokens=MAX_BATCH_TOKENS
    )
    try:
        shard_base(host, group)
        dp = DataParallel(host, group)
        held = {"sharded": is_sharded(host) and dp.sharded, "numel": local_base_numel(host)}
        torch.save(held, work / f"held-{rank}.pt")
        if rank == 0:
            record = session(host, dp, start)
            record["digest"] = dp.check_replicas("m")
            dp.stop()
            torch.save(record, work / "coordinator.pt")
        else:
            dp.serve()
    finally:
        group.close()


@pytest.fixture(scope="module")
def runs(tiny_catalog: ModelCatalog, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("sharded")
    host = ModelHost(
        TINY_MODEL,
        HostConfig(spill_dir=work / "spill-ref", max_batch_tokens=MAX_BATCH_TOKENS),
        tiny_catalog,
    )
    host.create_adapter("m", LORA)
    randomize_adapter(host, "m", seed=13)
    host.save_state("m", work / "start", optimizer=False)
    host.remove_adapter("m")
    ranks.spawn(_program, 2, work, tiny_catalog.cache_dir, work, work / "start")
    ours = torch.load(work / "coordinator.pt", weights_only=False)
    held = [torch.load(work / f"held-{r}.pt", weights_only=False) for r in range(2)]
    return ours, session(host, host, work / "start"), held


def test_each_rank_stores_half_the_base(runs) -> None:
    _, _, held = runs
    for h in held:
        assert h["sharded"]
        stored, total = h["numel"]
        assert abs(stored - total / 2) <= total * 0.01, (stored, total)
    assert held[0]["numel"][0] + held[1]["numel"][0] == held[0]["numel"][1]


def test_split_passes_equal_the_unsharded_model(runs) -> None:
    """Each request split across the ranks, micro-batch counts evened out with empty passes."""
    ours, ref, _ = runs
    for k, (mine, theirs) in enumerate(zip(ours["probes"], ref["probes"], strict=True)):
        a, b = mine["out"], theirs["out"]
        ranks.assert_close(a["metrics"]["loss:sum"], b["metrics"]["loss:sum"], f"probe {k} loss")
        assert a["metrics"]["tokens:sum"] == b["metrics"]["tokens:sum"] == sum(PROBES[k])
        for i, lp in enumerate(b["logprobs"]):
            ranks.assert_close(a["logprobs"][i], lp, f"probe {k} datum {i} logprobs")
        assert set(mine["grads"]) == set(theirs["grads"]) and theirs["grads"]
        for name, grad in theirs["grads"].items():
            ranks.assert_close(mine["grads"][name], grad, f"probe {k} grad {name}")
    for i, lp in enumerate(ref["base_forward"]["logprobs"]):
        ranks.assert_close(ours["base_forward"]["logprobs"][i], lp, f"base datum {i} logprobs")


def test_a_loss_that_is_not_finite_stops_every_rank(runs) -> None:
    ours, ref, _ = runs
    assert ours["poisoned"] == ref["poisoned"] == "data[2]"
    assert ours["rolled_back"] and ref["rolled_back"]


def test_it_trains(runs) -> None:
    ours, ref, _ = runs
    losses = ours["losses"]
    assert losses[-1] < 0.9 * losses[0], losses
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    for k, (a, b) in enumerate(zip(losses, ref["losses"], strict=True)):
        # Adam carries float32 summation noise forward a little each step: 1e-4 after six steps.
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), (k, a, b)


def test_greedy_sampling_equals_the_unsharded_model(runs) -> None:
    ours, ref, _ = runs
    assert len(ref["greedy"]) == 10
    assert ours["greedy"] == ref["greedy"]


def test_sampler_weights_and_batched_sampling_equal_the_unsharded_model(runs) -> None:
    """Weights saved and loaded as a sampler adapter on every rank, then one batch of the live
    model, the sampler adapter and the base: the unsharded host's tokens and prompt logprobs."""
    ours, ref, _ = runs
    assert ours["many"] == ref["many"]
    assert ours["many"][0] == ours["many"][1] == ours["greedy"][:6]
    assert ref["prompt_logprobs"][0] is None
    ranks.assert_close(
        torch.tensor(ours["prompt_logprobs"][1:]),
        torch.tensor(ref["prompt_logprobs"][1:]),
        "prompt logprobs",
    )
    assert ours["heard"] == ref["heard"] > 0
    assert ours["unknown"] == ref["unknown"] == "UnknownAdapter"


def test_a_sampling_failure_that_is_no_requests_fails_the_whole_call_on_a_sharded_host(
    host: ModelHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single host goes on to the next batch; a rank of a sharded base must not (the other
    ranks are in this batch's collectives), so the call fails and the ranks stop together."""

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(host, "_sample_wave", broken)
    job = SampleJob(prompt=PROMPT, max_tokens=2, temperature=0.0)
    (alone,) = host.sample_many([(None, [job])])
    assert isinstance(alone, RuntimeError)
    host.ranks_in_step = True  # what shard_base sets
    with pytest.raises(RuntimeError, match="out of memory"):
        host.sample_many([(None, [job])])
    # a request's own error is still its result
    bad = SampleJob(prompt=PROMPT, max_tokens=0)
    (refused,) = host.sample_many([(None, [bad])])
    assert isinstance(refused, InvalidInput)
