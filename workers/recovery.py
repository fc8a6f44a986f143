"""Bringing a training model back on this worker after it was lost: its recovery point loaded,
then the training operations completed since replayed in ``seq_id`` order, each result compared
with the one recorded when it first ran. Replays write nothing (no usage, no checkpoints); a
replay whose results drift beyond the tolerance fails the model instead of diverging silently.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from controlplane import worker_port as port
from controlplane.worker_port import Fence

from .engine.interface import Engine
from .executor import opened, run_training
from .sealing import Vault

log = logging.getLogger("loopwright.worker")

# Results of a replayed operation may differ from the recorded ones by this much (relative):
# on the same hardware they are identical; another CPU's or GPU's kernels sum in another order.
TOLERANCE = float(os.environ.get("LOOPWRIGHT_REPLAY_TOLERANCE", "1e-4"))
# the metric each kind's result is compared by
COMPARED = {"forward_backward": "loss:sum", "optim_step": "grad_norm:mean"}


class ReplayDiverged(Exception):
    """A replayed operation gave another result than when it first ran."""


@dataclass(frozen=True)
class Restored:
    model_id: str
    tenant_id: object
    start: str
    replayed: int
    deviation: float  # the largest relative difference of a compared metric
    seconds: float
    last_seq: int  # the state on the host is the one after this operation
    optimizer_steps: int  # replayed optim_steps (since the recovery point)


def restore_model(
    host: Engine,
    model_id: str,
    *,
    fence: Fence,
    worker_name: str,
    vault: Callable[[object], Vault],
    threads: Callable[[str, dict], AbstractContextManager],
) -> Restored:
    """Restore ``model_id`` onto ``host``; raises ``port.NotHere`` if it is not this
    worker's, ``ReplayDiverged`` or an engine/storage error if it cannot be restored."""
    started = time.perf_counter()
    plan = port.restore_plan(model_id=model_id, fence=fence)
    tenant_vault = vault(plan.model.tenant_id)
    if host.has_adapter(model_id):
        host.remove_adapter(model_id)
    try:
        if plan.point is not None:
            with opened(plan.point, tenant_vault) as folder:
                host.restore(model_id, folder)
        deviation, steps = 0.0, 0
        for op in plan.replay:
            payload = port.request_payload(op)  # its images opened, as when it first ran
            with threads(op.kind, payload):
                result = run_training(host, op.kind, payload, op.plan, tenant_vault)
            deviation = max(deviation, _compared(op, result))
            steps += op.kind == "optim_step"
    except BaseException:
        if host.has_adapter(model_id):
            host.remove_adapter(model_id)
        raise
    port.restore_finished(
        plan=plan,
        fence=fence,
        worker_name=worker_name,
        replayed=len(plan.replay),
        deviation=deviation,
    )
    last_seq = plan.replay[-1].seq_id if plan.replay else int((plan.point or {}).get("seq", -1))
    done = Restored(
        model_id=model_id,
        tenant_id=plan.model.tenant_id,
        start=plan.start,
        replayed=len(plan.replay),
        deviation=deviation,
        seconds=time.perf_counter() - started,
        last_seq=last_seq,
        optimizer_steps=steps,
    )
    log.warning(
        "restored %s from %s: %d operation(s) replayed in %.2f s (largest deviation %.3g)",
        model_id,
        done.start,
        done.replayed,
        done.seconds,
        done.deviation,
    )
    return done


def _compared(op, result: dict) -> float:
    """How far the replayed result is from the recorded one (relative); raise beyond the
    tolerance."""
    metric = COMPARED.get(op.kind)
    if metric is None:
        return 0.0
    was = float(((op.result or {}).get("metrics") or {}).get(metric, math.nan))
    now = float((result.get("metrics") or {}).get(metric, math.nan))
    if was == now:
        return 0.0
    deviation = abs(now - was) / max(abs(was), 1e-12)
    if not deviation <= TOLERANCE:  # also NaN
        raise ReplayDiverged(
            f"replaying seq_id {op.seq_id} ({op.kind}) gave {metric} {now!r}, but it was "
            f"{was!r} when it ran (tolerance {TOLERANCE:g} relative)"
        )
    return deviation
