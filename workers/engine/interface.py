"""The engine as the worker calls it, in two protocols.

``AdapterEngine``: the calls that make, change, read or save one adapter, and sampling. A host
(``ModelHost``), a replica group led from its coordinator (``DataParallel``) and the worker's
router between the two (``workers.replicated_host.ReplicatedHost``) each answer them.

``Engine``: what the worker's operations run on (``workers.executor``, ``workers.recovery``):
``AdapterEngine`` plus what only a host answers on its own (whether it holds an adapter, the
packed calls of many sessions, merged exports, its sampler's checks of a request).
``ModelHost`` and ``ReplicatedHost`` are ``Engine``s.

Arguments are positional in both, as the worker passes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from loopwright.types import (
    ForwardBackwardInput,
    ForwardBackwardOutput,
    OptimParams,
    OptimStepResponse,
)

from .adapters import AdapterConfig
from .checkpoints import CheckpointMeta
from .sampler import SampleJob, Sampler, SampleResult, TokenSink


@runtime_checkable
class AdapterEngine(Protocol):
    def create_adapter(self, model_id: str, lora: AdapterConfig, /) -> None: ...

    def remove_adapter(self, model_id: str, /) -> None: ...

    def forward(self, model_id: str | None, fwd: ForwardBackwardInput, /) -> ForwardBackwardOutput:
        """Losses and logprobs without gradients (``model_id`` None: the base model)."""
        ...

    def forward_backward(
        self, model_id: str, fwd: ForwardBackwardInput, /
    ) -> ForwardBackwardOutput: ...

    def optim_step(self, model_id: str, step: OptimParams, /) -> OptimStepResponse: ...

    def sample_many(
        self,
        requests: Sequence[tuple[str | None, Sequence[SampleJob]]],
        on_tokens: TokenSink | None = None,
        /,
    ) -> list[list[SampleResult] | Exception]:
        """Each request's results, or the error that is that request's alone."""
        ...

    def save_state(
        self, model_id: str, directory: Path, /, *, optimizer: bool = True
    ) -> CheckpointMeta: ...

    def load_state(self, model_id: str, directory: Path, /, *, optimizer: bool) -> CheckpointMeta:
        """An existing adapter's weights (and optimizer state, if ``optimizer``) from a save."""
        ...

    def load_adapter_from(self, model_id: str, directory: Path, /) -> CheckpointMeta:
        """A new adapter made from saved weights (to sample from)."""
        ...

    def restore(self, model_id: str, directory: Path, /) -> CheckpointMeta:
        """A snapshot (weights, optimizer state, pending gradients) as a new adapter."""
        ...


@runtime_checkable
class Engine(AdapterEngine, Protocol):
    @property
    def sampler(self) -> Sampler:
        """Checks a sample request before it runs (``Sampler.validate``)."""
        ...

    def has_adapter(self, model_id: str, /) -> bool: ...

    def has_pending_gradients(self, model_id: str, /) -> bool: ...

    def export_merged(self, model_id: str, directory: Path, /) -> Path: ...

    def forward_many(
        self, requests: Sequence[tuple[str | None, ForwardBackwardInput]], /
    ) -> list[ForwardBackwardOutput | Exception]: ...

    def forward_backward_many(
        self, requests: Sequence[tuple[str, ForwardBackwardInput]], /
    ) -> list[ForwardBackwardOutput | Exception]: ...

    def optim_step_many(
        self, requests: Sequence[tuple[str, OptimParams]], /
    ) -> list[OptimStepResponse | Exception]: ...
