"""One session served by a group of ranks, each with its own ModelHost, as if by one host.

The protocol: rank 0 (the coordinator) alone receives requests (it is the worker that claims
operations) and calls the methods below; every other rank (a follower) runs ``serve()``, which
waits for the coordinator's header of each operation (``broadcast_object_list``) and joins it.
A forward_backward is checked on the coordinator first (a bad request is refused there and
nothing is sent), its datums split by token count (``split_by_tokens``) and scattered, each
rank's share run on its host, the LoRA gradients of the call summed across ranks, and the
per-datum outputs gathered back to the coordinator in the request's order. If any rank fails,
every rank puts its gradients back as they were before the call and the coordinator raises the
error (datum indices in it are the request's). On a sharded base (``sharding``) the ranks also
keep their passes in step (``lockstep``), and sampling runs on every rank.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from loopwright.types import (
    ForwardBackwardInput,
    ForwardBackwardOutput,
    OptimParams,
    OptimStepResponse,
)

from .. import checkpoints
from ..adapters import AdapterConfig
from ..errors import CheckpointError, EngineError, InvalidInput, UnknownAdapter
from ..host import ModelHost
from ..sampler import SampleJob, SampleResult, TokenSink
from . import lockstep, replicas
from .group import RankGroup
from .sharding import is_sharded
from .split import split_by_tokens

_DATUM = re.compile(r"^data\[(\d+)\]")


class ReplicaError(EngineError):
    """A rank failed for a reason that is not the request's (or the replicas disagree)."""

    category = "server"


@dataclass(frozen=True)
class _Failure:
    """A rank's error in a form every rank can unpickle."""

    rank: int
    kind: str  # "invalid" | "unknown_adapter" | "checkpoint" | "aborted" | "other"
    text: str
    field: str = ""
    message: str = ""

    @classmethod
    def of(cls, rank: int, exc: BaseException, indices: Sequence[int]) -> _Failure:
        if isinstance(exc, InvalidInput):
            field = _DATUM.sub(lambda m: f"data[{indices[int(m.group(1))]}]", exc.field)
            return cls(rank, "invalid", str(exc), field, exc.message)
        if isinstance(exc, UnknownAdapter):
            return cls(rank, "unknown_adapter", str(exc), exc.model_id)
        if isinstance(exc, lockstep.PassAborted):
            return cls(rank, "aborted", str(exc))
        if isinstance(exc, CheckpointError):
            return cls(rank, "checkpoint", str(exc))
        return cls(rank, "other", f"{type(exc).__name__}: {exc}")

    def error(self) -> EngineError:
        if self.kind == "invalid":
            return InvalidInput(self.field, self.message)
        if self.kind == "unknown_adapter":
            return UnknownAdapter(self.field)
        if self.kind == "checkpoint":
            return CheckpointError(self.text)
        return ReplicaError(f"rank {self.rank}: {self.text}")


class DataParallel:
    """The coordinator's methods mirror ``ModelHost``'s; followers call ``serve()``."""

    def __init__(self, host: ModelHost, group: RankGroup) -> None:
        self.host = host
        self.group = group
        # On a sharded base every rank takes part in every pass (FSDP all-gathers in each).
        self.sharded = is_sharded(host)

    # -- the coordinator's side ------------------------------------------------------------
    def create_adapter(self, model_id: str, lora: AdapterConfig) -> None:
        """Created on every rank, then rank 0's initial weights everywhere (seed or not)."""
        self._send("create_adapter", model_id=model_id, lora=lora)

    def remove_adapter(self, model_id: str) -> None:
        self._send("remove_adapter", model_id=model_id)

    def forward_backward(self, model_id: str, fwd: ForwardBackwardInput) -> ForwardBackwardOutput:
        return self._pass(model_id, fwd, backward=True)

    def forward(self, model_id: str | None, fwd: ForwardBackwardInput) -> ForwardBackwardOutput:
        return self._pass(model_id, fwd, backward=False)

    def optim_step(self, model_id: str, adam: OptimParams) -> OptimStepResponse:
        """The same optimizer step on every rank's identical gradients: identical weights
        after."""
        return self._send("optim_step", model_id=model_id, adam=adam)

    def sample(self, model_id: str | None, jobs: Sequence[SampleJob]) -> list[SampleResult]:
        """On the coordinator alone; on a sharded base on every rank, each job's seed fixed by
        the coordinator so every rank decodes the same tokens (and as many steps)."""
        self._require_coordinator()
        if not self.sharded:
            return self.host.sample(model_id, jobs)
        return self._send("sample", model_id=model_id, jobs=_seeded(jobs))

    def sample_many(
        self,
        requests: Sequence[tuple[str | None, Sequence[SampleJob]]],
        on_tokens: TokenSink | None = None,
    ) -> list[list[SampleResult] | Exception]:
        """``ModelHost.sample_many``: on the coordinator alone, or on a sharded base on every
        rank with every job seeded (tokens are heard on the coordinator only)."""
        self._require_coordinator()
        if not self.sharded:
            return self.host.sample_many(requests, on_tokens)
        seeded = [(model_id, _seeded(jobs)) for model_id, jobs in requests]
        return self._send("sample_many", {"on_tokens": on_tokens}, requests=seeded)

    def load_adapter_from(self, model_id: str, directory: Path) -> checkpoints.CheckpointMeta:
        """An adapter made from saved weights (to sample from): read by the coordinator, then
        its state broadcast to every rank."""
        return self._send("load_adapter_from", model_id=model_id, directory=Path(directory))

    def save_state(
        self, model_id: str, directory: Path, *, optimizer: bool = True
    ) -> checkpoints.CheckpointMeta:
        """Written by the coordinator alone: every rank holds the same state."""
        self._require_coordinator()
        return self.host.save_state(model_id, directory, optimizer=optimizer)

    def load_state(
        self, model_id: str, directory: Path, *, optimizer: bool
    ) -> checkpoints.CheckpointMeta:
        """Read and checked by the coordinator (only it needs the folder), then its adapter
        state broadcast to every rank."""
        return self._send(
            "load_state", model_id=model_id, directory=Path(directory), optimizer=optimizer
        )

    def restore(self, model_id: str, directory: Path) -> checkpoints.CheckpointMeta:
        """A snapshot (weights, AdamW state, pending gradients) restored on every rank."""
        return self._send("restore", model_id=model_id, directory=Path(directory))

    def check_replicas(self, model_id: str) -> str:
        """The digest of the adapter's state, identical on every rank, or a ReplicaError."""
        return self._send("check_replicas", model_id=model_id)

    def ping(self) -> None:
        """An empty round: followers wait for the next header within the group's timeout, so an
        idle coordinator pings more often than that."""
        self._send("ping")

    def stop(self) -> None:
        """Ends every follower's ``serve()``."""
        self._send("stop")

    # -- the followers' side ---------------------------------------------------------------
    def serve(self) -> None:
        """Join each operation the coordinator starts, until it sends ``stop``. An operation's
        error is the coordinator's to report; a broken group (a rank gone) raises here."""
        if self.group.is_coordinator:
            raise RuntimeError("serve() runs on followers; rank 0 calls the methods")
        while True:
            op, args = self.group.broadcast()
            if op == "stop":
                return
            try:
                self._run(op, args)
            except EngineError:
                continue

    # -- every rank ------------------------------------------------------------------------
    def _require_coordinator(self) -> None:
        if not self.group.is_coordinator:
            raise RuntimeError("only rank 0 takes requests; followers run serve()")

    def _send(self, op: str, coordinator_only: Mapping[str, Any] | None = None, **args: Any) -> Any:
        """Broadcast the header ``(op, args)`` and take part; ``coordinator_only`` arguments
        stay here (what the operation distributes itself, e.g. each rank's share)."""
        self._require_coordinator()
        self.group.broadcast((op, args))
        return None if op == "stop" else self._run(op, {**args, **(coordinator_only or {})})

    def _pass(
        self, model_id: str | None, fwd: ForwardBackwardInput, *, backward: bool
    ) -> ForwardBackwardOutput:
        self._require_coordinator()
        lengths = self.host.datum_lengths(model_id, fwd, backward=backward)  # refuse before sending
        shares = [
            (
                idx,
                [lengths[i] for i in idx],
                fwd.model_copy(update={"data": [fwd.data[i] for i in idx]}) if idx else None,
            )
            for idx in split_by_tokens(lengths, self.group.world_size)
        ]
        return self._send(
            "pass", {"shares": shares}, model_id=model_id, backward=backward, n=len(lengths)
        )

    def _run(self, op: str, args: Mapping[str, Any]) -> Any:
        run = getattr(self, f"_run_{op}")
        with self.host.exclusive():
            return run(**args)

    def _agree(self, error: BaseException | None, indices: Sequence[int] = ()) -> None:
        """Raise on every rank if any rank failed: the coordinator raises its own error, or the
        first follower's."""
        mine = None if error is None else _Failure.of(self.group.rank, error, indices)
        failures = [f for f in self.group.all_gather(mine) if f is not None]
        if not failures:
            return
        # A rank that stopped because another failed reports the other's error.
        causes = [f for f in failures if f.kind != "aborted"] or failures
        if mine is not None and mine.kind != "aborted" and self.group.is_coordinator:
            raise mine.error() if isinstance(error, InvalidInput) and indices else error  # type: ignore[misc]
        raise causes[0].error()

    def _attempt(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, BaseException | None]:
        try:
            return fn(*args, **kwargs), None
        except Exception as exc:
            return None, exc

    def _run_pass(
        self, model_id: str | None, backward: bool, n: int, shares: list | None = None
    ) -> ForwardBackwardOutput | None:
        indices, lengths, fwd = self.group.scatter(shares)
        run = self.host.forward_backward if backward else self.host.forward
        params: dict[str, torch.nn.Parameter] = {}
        out, error = None, None
        if backward:
            params, error = self._attempt(self.host.pool.parameters, model_id)
            params = params or {}
        before = {name: p.grad for name, p in params.items()}
        try:
            if self.sharded:
                self._agree(error, indices)  # every rank starts the passes, or none does
            for p in params.values():
                p.grad = None  # the call's own share, summed across ranks below
            if self.sharded:
                out, error = self._attempt(
                    lockstep.run_in_step, self.host, self.group.device, run, model_id, fwd, lengths
                )
            elif fwd is not None and error is None:
                out, error = self._attempt(run, model_id, fwd)
            self._agree(error, indices)
        except BaseException:
            replicas.restore_gradients(params, before)
            raise
        replicas.reduce_gradients(params, before)
        parts = self.group.gather((indices, out))
        return None if parts is None else _merge(parts, n)

    def _run_optim_step(self, model_id: str, adam: OptimParams) -> OptimStepResponse | None:
        out, error = self._attempt(self.host.optim_step, model_id, adam)
        self._agree(error)
        return out

    def _run_create_adapter(self, model_id: str, lora: AdapterConfig) -> None:
        if not self.group.is_coordinator and self.host.has_adapter(model_id):
            self.host.remove_adapter(model_id)  # a model made again from its start
        _, error = self._attempt(self.host.create_adapter, model_id, lora)
        self._agree(error)
        replicas.broadcast_adapter(self.host, self.group, model_id)

    def _run_remove_adapter(self, model_id: str) -> None:
        error = None
        if self.group.is_coordinator or self.host.has_adapter(model_id):
            # a follower that lacks it (dropped when a group ended) has nothing to remove
            _, error = self._attempt(self.host.remove_adapter, model_id)
        self._agree(error)

    def _run_load_state(
        self, model_id: str, directory: Path, optimizer: bool
    ) -> checkpoints.CheckpointMeta | None:
        meta, error = None, None
        if self.group.is_coordinator:
            meta, error = self._attempt(
                self.host.load_state, model_id, directory, optimizer=optimizer
            )
        self._agree(error)
        replicas.broadcast_adapter(self.host, self.group, model_id)
        return meta

    def _run_restore(self, model_id: str, directory: Path) -> checkpoints.CheckpointMeta | None:
        meta, error = None, None
        if self.group.is_coordinator:
            meta, error = self._attempt(self.host.restore, model_id, directory)
        self._agree(error)
        replicas.broadcast_adapter(self.host, self.group, model_id)
        return meta

    def _run_sample(self, model_id: str | None, jobs: list[SampleJob]) -> list[SampleResult]:
        out, error = self._attempt(self.host.sample, model_id, jobs)
        self._agree(error)
        return out

    def _run_sample_many(
        self,
        requests: list[tuple[str | None, list[SampleJob]]],
        on_tokens: TokenSink | None = None,
    ) -> list[list[SampleResult] | Exception]:
        # Per-request errors are in the results, alike on every rank; a failure of the call
        # itself (a collective inside the model) fails it everywhere.
        out, error = self._attempt(self.host.sample_many, requests, on_tokens)
        if error is None:  # a request's own error is its result; any other fails the call
            error = next(
                (r for r in out if isinstance(r, Exception) and not isinstance(r, EngineError)),
                None,
            )
        self._agree(error)
        return out

    def _run_load_adapter_from(
        self, model_id: str, directory: Path
    ) -> checkpoints.CheckpointMeta | None:
        meta, error = None, None
        if self.group.is_coordinator:
            meta, error = self._attempt(self.host.load_adapter_from, model_id, directory)
        self._agree(error)
        replicas.broadcast_adapter(self.host, self.group, model_id)
        return meta

    def _run_check_replicas(self, model_id: str) -> str:
        digest, error = self._attempt(replicas.state_digest, self.host, model_id)
        self._agree(error)
        digests = self.group.all_gather(digest)
        if len(set(digests)) != 1:
            differ = [r for r, d in enumerate(digests) if d != digests[0]]
            raise ReplicaError(f"model {model_id!r} differs from rank 0 on ranks {differ}")
        return digest

    def _run_ping(self) -> None:
        return None


def _seeded(jobs: Sequence[SampleJob]) -> list[SampleJob]:
    """Every job with a seed (the coordinator's draw where it had none): every rank of a sharded
    base decodes the same tokens, and as many steps."""
    return [
        job if job.seed is not None else replace(job, seed=secrets.randbits(63)) for job in jobs
    ]


def _merge(
    parts: Sequence[tuple[list[int], ForwardBackwardOutput | None]], n: int
) -> ForwardBackwardOutput:
    """Per-datum outputs back in the request's order; metrics combined by their suffix."""
    outputs: list[Any] = [None] * n
    metrics: dict[str, float] = {}
    kind = "ArrayRecord"
    for indices, out in parts:
        if out is None:
            continue
        kind = out.loss_fn_output_type
        for i, record in zip(indices, out.loss_fn_outputs, strict=True):
            outputs[i] = record
        for key, value in out.metrics.items():
            metrics[key] = value if key not in metrics else _combine(key, metrics[key], value)
    return ForwardBackwardOutput(loss_fn_output_type=kind, loss_fn_outputs=outputs, metrics=metrics)


def _combine(key: str, a: float, b: float) -> float:
    if key.endswith(":max"):
        return max(a, b)
    if key.endswith(":min"):
        return min(a, b)
    if key.endswith(":sum"):
        return a + b
    raise ReplicaError(f"metric {key!r} has no rule for combining ranks (:sum, :max or :min)")
