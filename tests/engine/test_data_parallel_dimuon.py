"""A 2-rank data-parallel Dimuon model trained with stable_reinforce equals one host: the same
losses and metrics, the same weights after each step, and every rank's weights, momentum and
pending gradients identical (``check_replicas``), also after a snapshot is restored."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from loopwright.types import Datum, DimuonParams, ForwardBackwardInput, ModelInput
from workers.engine import snapshots
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.distributed import DataParallel
from workers.engine.host import HostConfig, ModelHost

from . import ranks
from .reference import randomize_adapter

LORA = AdapterConfig(rank=4, alpha=8, optimizer="dimuon")
STEP = DimuonParams(learning_rate=0.02, grad_clip_norm=1.0)


def batch(seed: int) -> ForwardBackwardInput:
    rng = np.random.default_rng(seed)
    data = []
    for n in (9, 14, 6, 11):
        tokens = rng.integers(0, 256, size=n + 1).tolist()
        mask = np.array([0.0] * 3 + [1.0] * (n - 3), dtype=np.float32)
        data.append(
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "logprobs": rng.uniform(-7.0, -4.0, n).astype(np.float32),
                    "advantages": (mask * rng.normal(size=n)).astype(np.float32),
                    "sampled_mask": mask,
                },
            )
        )
    return ForwardBackwardInput(
        data=data, loss_fn="stable_reinforce", loss_fn_config={"kl_coeff": 0.05}
    )


def script(host, run, start, snapshot) -> dict:
    """What both sides run: ``run`` is a ModelHost or the coordinator's DataParallel."""
    record: dict = {"metrics": [], "weights": []}
    run.create_adapter("m", LORA)
    run.load_state("m", start, optimizer=False)
    for seed in range(3):
        record["metrics"].append(dict(run.forward_backward("m", batch(seed)).metrics))
        run.optim_step("m", STEP)
        record["weights"].append(ranks.adapter_tensors(host, "m")["weights"])
        if isinstance(run, DataParallel):
            run.check_replicas("m")  # raises unless every rank holds the same state
    run.forward_backward("m", batch(3))
    snapshots.write(host.capture("m"), snapshot)
    run.optim_step("m", STEP)
    run.restore("m", snapshot)
    if isinstance(run, DataParallel):
        run.check_replicas("m")
    run.optim_step("m", STEP)
    record["restored"] = ranks.adapter_tensors(host, "m")["weights"]
    record["momentum"] = {k: v.clone() for k, v in host.pool.optimizer("m").exp_avg.items()}
    return record


def _program(rank, world, rendezvous, cache_dir, work, start) -> None:
    host, group = ranks.join(rank, world, rendezvous, cache_dir, work)
    try:
        dp = DataParallel(host, group)
        if rank == 0:
            record = script(host, dp, start, work / "snapshot-dp")
            dp.stop()
            torch.save(record, work / "coordinator.pt")
        else:
            dp.serve()
    finally:
        group.close()


@pytest.fixture(scope="module")
def runs(tiny_catalog: ModelCatalog, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("dp-dimuon")
    host = ModelHost(TINY_MODEL, HostConfig(spill_dir=work / "spill-ref"), tiny_catalog)
    host.create_adapter("m", LORA)
    randomize_adapter(host, "m", seed=3)
    host.save_state("m", work / "start", optimizer=False)
    host.remove_adapter("m")
    ranks.spawn(_program, 2, work, tiny_catalog.cache_dir, work, work / "start")
    ours = torch.load(work / "coordinator.pt", weights_only=False)
    return ours, script(host, host, work / "start", work / "snapshot-ref")


def test_two_ranks_train_like_one_host(runs) -> None:
    ours, ref = runs
    for k, (mine, theirs) in enumerate(zip(ours["metrics"], ref["metrics"], strict=True)):
        assert mine.keys() == theirs.keys() and "masked_tokens:sum" in mine
        for key, value in theirs.items():
            ranks.assert_close(mine[key], value, f"step {k} {key}")
    for k, (mine, theirs) in enumerate(zip(ours["weights"], ref["weights"], strict=True)):
        for name, weight in theirs.items():
            ranks.assert_close(mine[name], weight, f"step {k} weight {name}")
    for name, weight in ref["restored"].items():
        ranks.assert_close(ours["restored"][name], weight, f"after restore {name}")
    for name, m in ref["momentum"].items():
        ranks.assert_close(ours["momentum"][name], m, f"momentum {name}")
