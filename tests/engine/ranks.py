"""Real rank processes for the distributed tests: spawned, joined over gloo through a file."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from loopwright.types import Datum, ModelInput
from workers.engine.catalog import TINY_MODEL, ModelCatalog
from workers.engine.distributed import RankGroup
from workers.engine.host import HostConfig, ModelHost


def spawn(program: Callable[..., None], world_size: int, tmp_path: Path, *args: object) -> None:
    """Run ``program(rank, world_size, rendezvous, *args)`` in ``world_size`` fresh processes;
    any rank's exception fails the call."""
    rendezvous = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(
        program,
        args=(world_size, rendezvous, *args),
        nprocs=world_size,
        join=True,
        start_method="spawn",
    )


def join(
    rank: int, world_size: int, rendezvous: str, cache_dir: Path, work: Path, **config: object
):
    """One thread per rank (the machine's cores are shared), a tiny-model host, the group; a
    collective that waits two minutes fails (a hang fails the test instead of blocking it)."""
    torch.set_num_threads(1)
    host = ModelHost(
        TINY_MODEL,
        HostConfig(spill_dir=work / f"spill-{rank}", **config),  # type: ignore[arg-type]
        ModelCatalog(cache_dir=cache_dir),
    )
    group = RankGroup.join(
        rendezvous, rank=rank, world_size=world_size, timeout=timedelta(minutes=2)
    )
    return host, group


def datum(rng: np.random.Generator, n: int, loss: str = "cross_entropy") -> Datum:
    tokens = rng.integers(0, 256, size=n + 1).tolist()
    inputs: dict = {"target_tokens": tokens[1:]}
    if loss == "cross_entropy":
        inputs["weights"] = rng.uniform(0.0, 1.0, size=n).astype(np.float32).tolist()
    else:
        inputs["logprobs"] = rng.uniform(-6.0, -4.0, size=n).astype(np.float32).tolist()
        inputs["advantages"] = rng.normal(size=n).astype(np.float32).tolist()
    return Datum(model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def assert_close(
    ours: np.ndarray | torch.Tensor, ref: np.ndarray | torch.Tensor, what: str
) -> None:
    """float32 agreement: 1e-5 relative to the reference's largest entry (at least 1), the
    slack of summing the same terms in another order."""
    a = torch.as_tensor(np.asarray(ours, dtype=np.float64))
    b = torch.as_tensor(np.asarray(ref, dtype=np.float64))
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    diff = float((a - b).abs().max()) if b.numel() else 0.0
    assert diff <= 1e-5 * scale, f"{what}: max |Δ| {diff:.3g} > 1e-5 × {scale:.3g}"


def adapter_tensors(host: ModelHost, model_id: str) -> dict[str, dict[str, torch.Tensor]]:
    params = host.pool.parameters(model_id)
    return {
        "weights": {k: p.detach().clone() for k, p in params.items()},
        "grads": {k: p.grad.clone() for k, p in params.items() if p.grad is not None},
    }


def outputs(out) -> dict:
    return {
        "metrics": dict(out.metrics),
        "logprobs": [r["logprobs"].to_numpy() for r in out.loss_fn_outputs],
        "losses": [r["elementwise_loss"].to_numpy() for r in out.loss_fn_outputs],
    }
