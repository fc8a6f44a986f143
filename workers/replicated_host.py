"""The engine as the runtime drives it: an ``Engine`` (``engine.interface``), where the calls that change a
data-parallel model (one with ``replicas`` > 1) go through its replica group's
``DataParallel`` (every rank takes part) and everything else runs on the host as before.

On a worker that shards its base over its group (``sharded_base``) every call runs on the
group, the base model's and sampling included: every rank takes part in every pass.

Otherwise reads and local work stay on the coordinator's host: sampling, saving, snapshots
(``capture``), merged exports, ``has_adapter``. The calls routed through the group are the ones
that change an adapter's state: create, remove, load, restore, forward, forward_backward,
optim_step. Packed calls of several models (``*_many``) never carry a data-parallel model:
the worker's pass runs those one by one.

A data-parallel model's call while this worker has no ready group raises ``GroupNotReady``
(its operation waits). A call that fails for a reason that is not the request's (a rank gone,
a collective timed out, the replicas disagree) ends the group (``on_broken``) and raises
``GroupNotReady`` too: the model is restored from its recovery point on the next group, and
the operation runs again there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loopwright.types import (
    ForwardBackwardInput,
    ForwardBackwardOutput,
    OptimParams,
    OptimStepResponse,
)

from .engine.adapters import AdapterConfig
from .engine.checkpoints import CheckpointMeta
from .engine.distributed import DataParallel
from .engine.errors import CheckpointError, InvalidInput, UnknownAdapter
from .engine.host import ModelHost
from .engine.sampler import SampleJob, Sampler, SampleResult, TokenSink
from .engine_cpu import engine_call
from .executor import NotNow

# Errors that are the request's, agreed on by every rank: the group is fine.
REQUEST_ERRORS = (InvalidInput, UnknownAdapter, CheckpointError)


class GroupNotReady(NotNow):
    """This worker has no ready replica group for a data-parallel model: its operation waits."""


class ReplicatedHost:
    def __init__(
        self, host: ModelHost, replicated: Callable[[str], bool], *, sharded_base: bool = False
    ) -> None:
        """``sharded_base``: this worker shards its base over its group, so every call (the
        base's and every adapter's, sampling too) runs on the group."""
        self.host = host
        self._replicated = replicated
        self.sharded_base = sharded_base
        self._dp: DataParallel | None = None
        self._on_broken: Callable[[BaseException], None] | None = None
        self._calls = threading.RLock()  # one collective round at a time (operations, pings)

    # -- the group -------------------------------------------------------------------------
    def attach(self, dp: DataParallel, on_broken: Callable[[BaseException], None]) -> None:
        """This worker now leads a ready group; ``on_broken`` is called when it fails."""
        with self._calls:
            self._dp, self._on_broken = dp, on_broken

    def detach(self) -> DataParallel | None:
        """No group any more (it ended): data-parallel models wait again. Returns the one it
        had. Waits for the call in flight."""
        with self._calls:
            dp, self._dp, self._on_broken = self._dp, None, None
            return dp

    def ping(self) -> None:
        """Keep the followers' wait for the next operation within the group's timeout; skipped
        while an operation runs (it is a round itself)."""
        if not self._calls.acquire(blocking=False):
            return
        try:
            if self._dp is not None:
                self._guarded(self._dp.ping)
        except GroupNotReady:
            pass
        finally:
            self._calls.release()

    def is_replicated(self, model_id: str | None) -> bool:
        if self.sharded_base:
            return True
        return model_id is not None and self._replicated(model_id)

    # -- the Engine interface ----------------------------------------------------------------
    # Routed through the group for a data-parallel model: the calls that change its state.
    @engine_call
    def create_adapter(self, model_id: str, lora: AdapterConfig, /) -> None:
        self._route(model_id, "create_adapter", model_id, lora)

    @engine_call
    def remove_adapter(self, model_id: str, /) -> None:
        self._route(model_id, "remove_adapter", model_id)

    @engine_call
    def forward(self, model_id: str | None, fwd: ForwardBackwardInput, /) -> ForwardBackwardOutput:
        return self._route(model_id, "forward", model_id, fwd)

    @engine_call
    def forward_backward(
        self, model_id: str, fwd: ForwardBackwardInput, /
    ) -> ForwardBackwardOutput:
        return self._route(model_id, "forward_backward", model_id, fwd)

    @engine_call
    def optim_step(self, model_id: str, step: OptimParams, /) -> OptimStepResponse:
        return self._route(model_id, "optim_step", model_id, step)

    @engine_call
    def load_state(self, model_id: str, directory: Path, /, *, optimizer: bool) -> CheckpointMeta:
        return self._route(model_id, "load_state", model_id, directory, optimizer=optimizer)

    @engine_call
    def restore(self, model_id: str, directory: Path, /) -> CheckpointMeta:
        return self._route(model_id, "restore", model_id, directory)

    @engine_call
    def sample_many(
        self,
        requests: Sequence[tuple[str | None, Sequence[SampleJob]]],
        on_tokens: TokenSink | None = None,
        /,
    ) -> list[list[SampleResult] | Exception]:
        """On a sharded base every rank samples; else the coordinator alone (replicas are
        identical)."""
        if not self.sharded_base:
            return self.host.sample_many(requests, on_tokens)
        return self._route(None, "sample_many", requests, on_tokens)

    @engine_call
    def sample(
        self, model_id: str | None, jobs: Sequence[SampleJob], on_tokens: TokenSink | None = None
    ) -> list[SampleResult]:
        (results,) = self.sample_many([(model_id, jobs)], on_tokens)
        if isinstance(results, Exception):
            raise results
        return results

    @engine_call
    def load_adapter_from(self, model_id: str, directory: Path, /) -> CheckpointMeta:
        if not self.sharded_base:
            return self.host.load_adapter_from(model_id, directory)
        return self._route(model_id, "load_adapter_from", model_id, directory)

    # On the coordinator's host alone: reads, and writes every rank's identical state.
    @property
    def sampler(self) -> Sampler:
        return self.host.sampler

    @engine_call
    def has_adapter(self, model_id: str, /) -> bool:
        return self.host.has_adapter(model_id)

    @engine_call
    def has_pending_gradients(self, model_id: str, /) -> bool:
        return self.host.has_pending_gradients(model_id)

    @engine_call
    def save_state(
        self, model_id: str, directory: Path, /, *, optimizer: bool = True
    ) -> CheckpointMeta:
        return self.host.save_state(model_id, directory, optimizer=optimizer)

    @engine_call
    def export_merged(self, model_id: str, directory: Path, /) -> Path:
        return self.host.export_merged(model_id, directory)

    # Packed calls of many sessions: never a data-parallel model (the pass runs those alone).
    @engine_call
    def forward_many(
        self, requests: Sequence[tuple[str | None, ForwardBackwardInput]], /
    ) -> list[ForwardBackwardOutput | Exception]:
        return self.host.forward_many(self._local(requests))

    @engine_call
    def forward_backward_many(
        self, requests: Sequence[tuple[str, ForwardBackwardInput]], /
    ) -> list[ForwardBackwardOutput | Exception]:
        return self.host.forward_backward_many(self._local(requests))

    @engine_call
    def optim_step_many(
        self, requests: Sequence[tuple[str, OptimParams]], /
    ) -> list[OptimStepResponse | Exception]:
        return self.host.optim_step_many(self._local(requests))

    # -- routing ---------------------------------------------------------------------------
    def _route(self, model_id: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        if not self.is_replicated(model_id):
            return getattr(self.host, method)(*args, **kwargs)
        with self._calls:
            if self._dp is None:
                raise GroupNotReady(f"model {model_id} waits for its replica group to form")
            return self._guarded(getattr(self._dp, method), *args, **kwargs)

    def _guarded(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a group call (holding ``_calls``); a failure that is not the request's ends the
        group here and becomes GroupNotReady."""
        try:
            return call(*args, **kwargs)
        except REQUEST_ERRORS:
            raise
        except Exception as exc:
            on_broken, self._dp, self._on_broken = self._on_broken, None, None
            if on_broken is not None:
                on_broken(exc)
            raise GroupNotReady(f"the replica group failed: {type(exc).__name__}: {exc}") from exc

    def _local(self, requests: Sequence[tuple[Any, ...]]) -> Any:
        replicated = [r[0] for r in requests if self.is_replicated(r[0])]
        if replicated:  # the pass runs these alone; packing one would train one rank only
            raise RuntimeError(f"data-parallel models in a packed call: {replicated}")
        return requests
