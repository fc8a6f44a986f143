"""One pass of a worker's drain: claim every training model's next operation and a fair share
of the samples at once, run them in the scheduler's engine calls (many sessions' operations of
one kind packed under the token budget, ``scheduling``), and record each call's operations as
soon as it returns, so no one waits for the whole pass.

Each operation's outcome is the one it would have had alone: its own result or error, its own
restore, its own retry; the worker's ``Recorder`` records it exactly as for a single operation.
A pass sees its worker only through a ``PassContext``: what it runs on and how it records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import structlog
from django.db import DatabaseError

from controlplane import metrics
from controlplane import worker_port as port

from .engine.host import ModelHost
from .executor import PACKED_CALLS, Outcome, SamplerAdapters, run_packed, run_samples
from .recording import Recorder
from .replicated_host import ReplicatedHost
from .scheduling import PACKED_KINDS, Scheduler, Work
from .sealing import Vault
from .token_stream import publisher as token_publisher

log = logging.getLogger("loopwright.worker")


@dataclass(frozen=True)
class PassContext:
    """What a pass needs of its worker, as of the pass's start (under the drain lock)."""

    worker: port.Worker  # its fleet row: what waits on it
    fence: port.Fence  # the lease every claim is made under
    sample_limit: int  # most samples one pass claims
    scheduler: Scheduler
    host: ModelHost  # samples of a base held whole run here
    engine: ReplicatedHost  # every training call (and samples of a sharded base)
    samplers: Callable[[], SamplerAdapters]  # saved sampler weights loaded (a group's end resets)
    recorder: Recorder
    stopping: Callable[[], bool]  # the worker was asked to stop: the running call is the last
    threads: Callable[[int | None], AbstractContextManager[object]]  # torch threads for tokens
    vault: Callable[[object], Vault]  # a tenant's checkpoint sealing
    replicated: Callable[[str], bool]  # whether a model trains on a replica group
    ready: Callable[..., bool]  # whether an operation's model is here (no restore first)
    held: Callable[..., Outcome | None]  # an operation's model brought onto the host (None: ok)
    restore: Callable[[str], Outcome | None]  # a model brought back (None: done)
    train: Callable[..., Outcome]  # one training operation, alone


class Pass:
    """One pass over a worker's work (under its drain lock)."""

    def __init__(self, ctx: PassContext) -> None:
        self.ctx = ctx
        self.unfinished: dict[str, object] = {}  # claimed, not recorded yet

    def run(self) -> tuple[int, bool]:
        """How many operations ran, and whether the look after the last piece of work (made by
        a plain completion's own statement, else one cheap query) found nothing waiting."""
        ctx = self.ctx
        heads, samples = port.claim_runnable(fence=ctx.fence, sample_limit=ctx.sample_limit)
        claimed = {op.pk: op for op in heads + samples}
        if not claimed:
            return 0, False
        try:
            unopened = self._open_images(claimed)
        except DatabaseError:
            ctx.recorder.put_back(claimed)  # pending again once the database answers
            raise
        progressed = 0
        for op in unopened:
            del claimed[op.pk]
            ctx.recorder.finish(op, unopened[op])
            progressed += 1
        if not claimed:
            return progressed, False
        self.unfinished = dict(claimed)
        waiting = None
        parts = [
            part
            for call in ctx.scheduler.plan([work_of(op) for op in claimed.values()])
            for part in self._parts(call.kind, [claimed[w.key] for w in call.items])
        ]
        for kind, ops in parts:
            try:
                ran, waiting = self._call(kind, ops)
            except BaseException:
                # What this call ran is not recorded, so its models' state here no longer
                # counts; everything claimed and not recorded is pending again once the
                # database answers (or goes with the lease, if that was lost).
                for op in ops:
                    if op.pk in self.unfinished:
                        ctx.recorder.drop(op)
                ctx.recorder.put_back(self.unfinished)
                raise
            progressed += ran
            if ctx.stopping():  # the call that ran was the last: the rest waits again
                for request_id in self.unfinished:
                    port.requeue(request_id=request_id, fence=ctx.fence)
                return progressed, True
        if not progressed:  # all put back to wait: a later pass (the heartbeat's look)
            return 0, False
        if waiting is None:
            waiting = port.has_waiting_work(worker=ctx.worker, older_than_seconds=None)
        return progressed, not waiting

    def _parts(self, kind: str, ops: list) -> list[tuple[str, list]]:
        """A packed call's operations whose models are here run first, together; then each
        whose model must be restored first (moved here from a lost worker) runs alone, right
        after its restore and recorded before the next restore starts. So no model waits for
        other models' restores: a worker that takes over many models gives each loop back as
        soon as its own model is restored."""
        if kind not in PACKED_CALLS:
            return [(kind, ops)]
        here = [op for op in ops if self.ctx.ready(op)]
        moved = [(kind, [op]) for op in ops if not self.ctx.ready(op)]
        return ([(kind, here)] if here else []) + moved

    @staticmethod
    def _open_images(claimed: dict) -> dict:
        """Open the sealed images of each claimed request in place (the engine sees them as
        sent); the operations whose images cannot be opened, with the outcome that fails them
        (the user's when the key is the cause: disabled, deleted)."""
        unopened = {}
        for op in claimed.values():
            try:
                op.payload = port.request_payload(op)
            except DatabaseError:
                raise
            except Exception as exc:
                category = "user" if getattr(exc, "status", 500) < 500 else "server"
                unopened[op] = Outcome(error=str(exc), category=category)
        return unopened

    def _call(self, kind: str, ops: list) -> tuple[int, bool | None]:
        """Run ``ops`` (of one kind) in one engine call and record each; how many ran (not put
        back to wait), and what the last completion found waiting (None: it did not look)."""
        many = len(ops) > 1
        ids = {"operation_ids": [o.pk for o in ops]} if many else {"operation_id": ops[0].pk}
        with structlog.contextvars.bound_contextvars(kind=kind, **ids):
            if kind == "sample":
                outcomes = self._samples(ops)
            elif kind in PACKED_CALLS:
                # one route, however many: a single operation is a pack of one. A data-parallel
                # model's call is a round of its replica group: alone, through the group.
                alone = [op for op in ops if self.ctx.replicated(op.model_id)]
                packed = [op for op in ops if op not in alone]
                outcomes = self._packed(kind, packed) if packed else {}
                outcomes.update((op.pk, self.ctx.train(op)) for op in alone)
            else:  # the kinds that do not pack: alone
                outcomes = {op.pk: self.ctx.train(op) for op in ops}
            if kind in PACKED_KINDS:
                metrics.ENGINE_CALL_OPERATIONS.labels(kind).observe(len(ops))
            return self._finish_all(ops, outcomes)

    def _finish_all(self, ops: list, outcomes: dict[str, Outcome]) -> tuple[int, bool | None]:
        recorder = self.ctx.recorder
        lost: DatabaseError | None = None
        ran, waiting = 0, None
        for op in ops:
            self.unfinished.pop(op.pk, None)
            if lost is not None:  # the database went away: these run again later
                recorder.unrecorded(op)  # its state here took it, the database's did not
                continue
            try:
                waiting = recorder.finish(op, outcomes[op.pk])
            except DatabaseError as exc:
                lost = exc
                continue
            ran += not outcomes[op.pk].retry
        if lost is not None:
            raise lost
        return ran, waiting

    def _samples(self, ops: list) -> dict[str, Outcome]:
        """Samples of any adapters (live training models, saved sampler weights, the base
        model) in one engine call; a live model that cannot be restored fails its own."""
        ctx = self.ctx
        outcomes: dict[str, Outcome] = {}
        live = {model_id for op in ops if (model_id := live_adapter(op.plan)) is not None}
        for model_id in sorted(live):
            if ctx.host.has_adapter(model_id):
                continue
            failed = ctx.restore(model_id)  # sampling from a live model needs its weights
            if failed is not None:
                for op in ops:
                    if live_adapter(op.plan) == model_id:
                        outcomes[op.pk] = failed
        runnable = [op for op in ops if op.pk not in outcomes]
        tokens = sum(port.work_tokens(op.kind, op.payload) or 0 for op in runnable)
        on_tokens = token_publisher.sink(
            [op.pk for op in runnable], [op.payload for op in runnable]
        )
        # Through the engine: on a sharded base every rank samples, else the host alone.
        with ctx.threads(tokens):
            ran = run_samples(
                ctx.engine,
                [(op.payload, op.plan) for op in runnable],
                ctx.samplers(),
                [ctx.vault(op.tenant_id) for op in runnable],
                on_tokens,
            )
        if on_tokens is not None:
            token_publisher.batch_done()
        outcomes.update((op.pk, outcome) for op, outcome in zip(runnable, ran, strict=True))
        return outcomes

    def _packed(self, kind: str, ops: list) -> dict[str, Outcome]:
        """Operations of one packed training kind (one, or several models') in one engine call;
        a model that cannot be restored fails (or waits) alone."""
        ctx = self.ctx
        outcomes: dict[str, Outcome] = {}
        for op in ops:
            failed = ctx.held(op)
            if failed is not None:
                outcomes[op.pk] = failed
        runnable = [op for op in ops if op.pk not in outcomes]
        counted = [port.work_tokens(op.kind, op.payload) for op in runnable]
        # optim_step: not counted in tokens
        tokens = None if None in counted else sum(c for c in counted if c is not None)
        started = time.perf_counter()
        with ctx.threads(tokens):
            ran = run_packed(ctx.engine, kind, [(op.payload, op.plan) for op in runnable])
        for op, outcome in zip(runnable, ran, strict=True):
            outcomes[op.pk] = outcome
            if not outcome.ok and outcome.category == "server":
                log.error("operation %s (%s) failed: %s", op.pk, op.kind, outcome.error)
        ms = 1000 * (time.perf_counter() - started)
        if len(runnable) == 1:  # a pack of one is logged as the operation it is
            (op,) = runnable
            log.info("%s %s seq=%s (%s tokens) %.1f ms", kind, op.model_id, op.seq_id, tokens, ms)
        else:
            log.info("%s x%d (%s tokens) %.1f ms", kind, len(runnable), tokens, ms)
        return outcomes


def work_of(op) -> Work:
    """A claimed operation as the scheduler sees it."""
    return Work(
        key=op.pk,
        tenant=str(op.tenant_id),
        owner=str(op.model_id or op.sampling_session_id or ""),
        kind=op.kind,
        tokens=port.work_tokens(op.kind, op.payload) or 0,
    )


def live_adapter(plan: dict) -> str | None:
    """The training model a sample reads the live weights of (None: base or saved weights)."""
    adapter = plan.get("adapter")
    if adapter is None or plan.get("storage_path"):
        return None
    return adapter
