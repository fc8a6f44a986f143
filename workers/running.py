"""Running one training operation alone on the engine, with as many torch threads as its size
is worth (a small operation on one thread: many threads only add their overhead)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from controlplane import worker_port as port

from .cpu_threads import cpu_threads, threads_for
from .engine.interface import Engine
from .executor import Outcome, classify, run_training
from .replicated_host import GroupNotReady
from .sealing import Vault

log = logging.getLogger("loopwright.worker")


class Runner:
    def __init__(
        self,
        engine: Engine,
        *,
        device: str,
        parameters: int,
        usual_threads: int,
        vault: Callable[[object], Vault],
        held: Callable[..., Outcome | None],
    ) -> None:
        """``parameters``: the base model's (what an operation's tokens are multiplied by);
        ``held``: brings an operation's model onto the host first (None: ready)."""
        self.engine = engine
        self.device = device
        self.parameters = parameters
        self.usual_threads = usual_threads
        self.vault = vault
        self.held = held

    def threads(self, tokens: int | None) -> AbstractContextManager[None]:
        """The torch threads for an engine call processing ``tokens`` (None: unknown)."""
        if self.device != "cpu" or tokens is None:
            return cpu_threads(self.usual_threads)
        return cpu_threads(threads_for(tokens, self.parameters, self.usual_threads))

    def op_threads(self, kind: str, payload: dict) -> AbstractContextManager[None]:
        return self.threads(port.work_tokens(kind, payload))

    def train(self, op) -> Outcome:
        """One training operation, alone."""
        failed = self.held(op)
        if failed is not None:
            return failed
        started = time.perf_counter()
        try:
            with self.op_threads(op.kind, op.payload):
                result = run_training(
                    self.engine, op.kind, op.payload, op.plan, self.vault(op.tenant_id)
                )
            outcome = Outcome(result=result)
        except GroupNotReady as exc:  # it runs once its replica group is (again) ready
            outcome = Outcome(error=str(exc), retry=True)
        except Exception as exc:
            outcome = classify(exc)
            if outcome.category == "server":
                log.exception("operation %s (%s) failed", op.pk, op.kind)
        log.info(
            "%s %s seq=%s %.1f ms",
            op.kind,
            op.model_id,
            op.seq_id,
            1000 * (time.perf_counter() - started),
        )
        return outcome
