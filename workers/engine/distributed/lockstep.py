"""One rank's share of a pass over a sharded base, in step with every other rank.

FSDP all-gathers a unit's weights inside every forward and backward, so every rank must make
the same passes in the same order. Before its share, a rank learns the largest number of
micro-batches any rank will run and, after its own, runs empty ones (one token, weight 0: its
gradients are exact zeros) up to it. Between each micro-batch's loss and its backward the ranks
agree whether any loss was not finite; if one was, every rank stops there, before the
backward, and the pass fails everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from loopwright.types import (
    Datum,
    ForwardBackwardInput,
    ForwardBackwardOutput,
    ModelInput,
    TensorData,
)

from ..errors import EngineError
from ..host import ModelHost
from ..mixed_pass import micro_batch_count

PAD = ForwardBackwardInput(
    data=[
        Datum(
            model_input=ModelInput.from_ints([0]),
            loss_fn_inputs={
                "target_tokens": TensorData(data=[0], dtype="int64"),
                "weights": TensorData(data=[0.0], dtype="float32"),
            },
        )
    ],
    loss_fn="cross_entropy",
)


class PassAborted(EngineError):
    """Another rank's loss was not finite: this rank stopped with it."""


def run_in_step(
    host: ModelHost,
    device: torch.device,
    run: Callable[[str | None, ForwardBackwardInput], ForwardBackwardOutput],
    model_id: str | None,
    fwd: ForwardBackwardInput | None,
    lengths: Sequence[int],
) -> ForwardBackwardOutput | None:
    """``run(model_id, fwd)`` (forward or forward_backward) on this rank's share (None: no
    datums), padded to the group's micro-batch count. Every rank calls it together."""
    mine = micro_batch_count(lengths, host.config.max_batch_tokens) if fwd is not None else 0
    count = torch.tensor([mine], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)

    def agree(failed_here: bool) -> None:
        failed = torch.tensor([int(failed_here)], dtype=torch.int64, device=device)
        dist.all_reduce(failed, op=dist.ReduceOp.MAX)
        if failed.item() and not failed_here:
            raise PassAborted("another rank's loss was not finite; this pass stopped with it")

    host.passes.before_backward = agree
    try:
        out = run(model_id, fwd) if fwd is not None else None
        for _ in range(int(count.item()) - mine):
            run(model_id, PAD)
        return out
    finally:
        host.passes.before_backward = None
