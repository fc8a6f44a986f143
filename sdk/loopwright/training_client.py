"""TrainingClient: one LoRA training model in its own session; every operation returns a future.

Training requests carry ``seq_id`` (1, 2, 3, … per model, reserved when called) and reach the
server in call order; the server runs them in seq_id order.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from . import _custom_loss
from ._chunking import merge_outputs, split_chunks
from ._http import RawBody
from ._ordering import SeqOrder
from ._runtime import Runtime, wire
from ._session import Session, stop_quietly
from ._tokenizer import load_tokenizer
from .futures import APIFuture, CombinedAPIFuture
from .proto.fwdbwd import encode_forward_backward
from .sampling_client import SamplingClient, open_sampling_session
from .types import (
    AdamParams,
    ClientConfigResponse,
    Datum,
    ForwardBackwardInput,
    ForwardBackwardOutput,
    GetInfoResponse,
    LoadWeightsRequest,
    LoadWeightsResponse,
    LossFnType,
    OptimParams,
    OptimStepRequest,
    OptimStepResponse,
    ParsedCheckpointTinkerPath,
    SaveWeightsForSamplerRequest,
    SaveWeightsForSamplerResponse,
    SaveWeightsForSamplerResponseInternal,
    SaveWeightsRequest,
    SaveWeightsResponse,
    SessionInfo,
    UnloadModelRequest,
    UnloadModelResponse,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["TrainingClient", "check_training_path"]

T = TypeVar("T")


def _first(results: list[T]) -> T:
    return results[0]


def _protobuf(config: ClientConfigResponse, path: str) -> bool:
    """Whether ``path`` ("forward" or "forward_backward") goes as a protobuf forward_backward:
    when the server takes protobuf bodies (and, for a forward, takes it as forward_only)."""
    takes = config.proto_compress_fwdbwd or config.proto_write_fwdbwd
    return takes and (path == "forward_backward" or config.fwd_via_fwdbwd)


def check_training_path(path: str) -> None:
    """Refuse sampler weights where training state is needed, with the reason."""
    try:
        parsed = ParsedCheckpointTinkerPath.from_tinker_path(path)
    except ValueError:
        return  # not a tinker:// checkpoint path (e.g. a model package ARN): the server decides
    if parsed.checkpoint_type == "sampler":
        raise ValueError(
            f"{path} holds sampler weights, which cannot be loaded for training; "
            "load a training state saved with save_state() (tinker://<model_id>/weights/<name>)"
        )


class TrainingClient:
    """A training model: forward_backward, optim_step, checkpoints, samplers. Use ``with`` to stop."""

    def __init__(
        self,
        runtime: Runtime,
        session: Session,
        model_id: str,
        base_model: str,
        next_seq_id: int = 1,
    ) -> None:
        self._runtime = runtime
        self._session = session
        self.model_id = model_id
        """The model's id (also its training run id and the host part of its tinker:// paths)."""
        self.base_model = base_model
        """The base model it fine-tunes."""
        self._order = SeqOrder(next_seq_id)
        self._tokenizer: PreTrainedTokenizerBase | None = None

    @property
    def session_id(self) -> str:
        """The session this model lives in (one session per training client)."""
        return self._session.session_id

    def _ordered(
        self,
        path: str,
        make_bodies: Callable[[list[int]], list[dict[str, Any]]],
        count: int,
        parse: Callable[[Any], Any],
        combine: Callable[[list[Any]], T],
    ) -> APIFuture[T]:
        ticket = self._order.reserve(count)
        try:
            bodies = make_bodies(ticket.seq_ids)
        except BaseException:
            ticket.done_sending()
            raise
        return self._runtime.ordered(path, bodies, parse, combine, ticket)

    def _single(
        self, path: str, request: Any, parse: Callable[[Any], T], default_name: str = ""
    ) -> APIFuture[T]:
        """One request, validated before its seq_id is taken (a taken seq_id must be sent)."""

        def bodies(seq_ids: list[int]) -> list[dict[str, Any]]:
            update: dict[str, Any] = {"seq_id": seq_ids[0]}
            if default_name and request.path is None:
                update["path"] = f"{default_name}-{seq_ids[0]:06d}"
            return [wire(request.model_copy(update=update))]

        return self._ordered(path, bodies, 1, parse, _first)

    # -- forward and backward ------------------------------------------------------------------

    def _batch(
        self,
        path: str,
        data: Sequence[Datum],
        loss_fn: LossFnType,
        loss_fn_config: dict[str, float | str] | None,
    ) -> APIFuture[ForwardBackwardOutput]:
        if not data:
            raise ValueError(f"{path} needs at least one datum")
        # Validate every chunk before any seq_id is taken, so a bad batch leaves no gap.
        inputs = [
            ForwardBackwardInput(data=chunk, loss_fn=loss_fn, loss_fn_config=loss_fn_config)
            for chunk in split_chunks(data)
        ]

        config = self._runtime.client_config()
        if _protobuf(config, path):
            # A server that takes protobuf gets it (forward as forward_only), zstd when it asks.
            compress, forward_only = config.proto_compress_fwdbwd, path == "forward"
            headers = {"Content-Type": "application/x-protobuf"}
            if compress:
                headers["Content-Encoding"] = "zstd"

            def encoded(seq_ids: list[int]) -> list[Any]:
                return [
                    RawBody(
                        encode_forward_backward(
                            self.model_id, s, i, forward_only=forward_only, compress=compress
                        ),
                        headers,
                    )
                    for i, s in zip(inputs, seq_ids, strict=True)
                ]

            return self._ordered(
                "forward_backward",
                encoded,
                len(inputs),
                ForwardBackwardOutput.model_validate,
                merge_outputs,
            )

        # The body of ForwardRequest / ForwardBackwardRequest, without revalidating the batch.
        key = "forward_input" if path == "forward" else "forward_backward_input"

        def bodies(seq_ids: list[int]) -> list[dict[str, Any]]:
            return [
                {key: wire(i), "model_id": self.model_id, "seq_id": s}
                for i, s in zip(inputs, seq_ids, strict=True)
            ]

        return self._ordered(
            path, bodies, len(inputs), ForwardBackwardOutput.model_validate, merge_outputs
        )

    def forward(
        self,
        data: Sequence[Datum],
        loss_fn: LossFnType = "cross_entropy",
        loss_fn_config: dict[str, float | str] | None = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Loss and per-datum logprobs without gradients (chunks of ≤1024 datums, merged)."""
        return self._batch("forward", data, loss_fn, loss_fn_config)

    def forward_backward(
        self,
        data: Sequence[Datum],
        loss_fn: LossFnType,
        loss_fn_config: dict[str, float | str] | None = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Loss and gradients, accumulated until the next optim_step (chunks sent concurrently)."""
        return self._batch("forward_backward", data, loss_fn, loss_fn_config)

    def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: _custom_loss.CustomLossFn
    ) -> APIFuture[ForwardBackwardOutput]:
        """Backpropagate ``loss_fn(data, logprobs_list) -> (loss, metrics)`` computed here in torch.

        Blocks for the forward pass, runs the loss, then returns the backward pass's future; its
        metrics include the loss function's metrics.
        """
        forward = self.forward(_custom_loss.forward_data(data)).result()
        linear, metrics = _custom_loss.linearize(data, forward, loss_fn)
        backward = self.forward_backward(linear, "cross_entropy")
        return CombinedAPIFuture([backward], lambda r: _custom_loss.with_metrics(r[0], metrics))

    def optim_step(
        self, params: OptimParams | None = None, *, adam_params: AdamParams | None = None
    ) -> APIFuture[OptimStepResponse]:
        """Apply the accumulated gradients and clear them, with the optimizer the model was made
        with: ``AdamParams`` for AdamW, ``DimuonParams`` for Dimuon (the other family's are a
        ``BadRequestError`` naming their field). ``adam_params=`` is the older keyword, as in
        tinker."""
        if (params is None) == (adam_params is None):
            raise ValueError("give the step's params, or the older adam_params=, not both")
        params = params if params is not None else adam_params
        if isinstance(params, AdamParams):
            request = OptimStepRequest(adam_params=params, model_id=self.model_id)
        else:
            request = OptimStepRequest(optimizer_params=params, model_id=self.model_id)
        return self._single("optim_step", request, OptimStepResponse.model_validate)

    # -- checkpoints ---------------------------------------------------------------------------

    def save_state(
        self, name: str | None = None, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """Save adapter and optimizer as ``tinker://<model_id>/weights/<name>``.

        ``name`` defaults to ``state-<seq_id, 6 digits>``, unique within the model.
        """
        request = SaveWeightsRequest(
            model_id=self.model_id, path=name, ttl_seconds=ttl_seconds, overwrite=overwrite
        )
        return self._single("save_weights", request, SaveWeightsResponse.model_validate, "state")

    def _load(self, path: str, optimizer: bool) -> APIFuture[LoadWeightsResponse]:
        check_training_path(path)
        request = LoadWeightsRequest(model_id=self.model_id, path=path, optimizer=optimizer)
        return self._single("load_weights", request, LoadWeightsResponse.model_validate)

    def load_state(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Load adapter weights from a training checkpoint; the optimizer starts afresh."""
        return self._load(path, optimizer=False)

    def load_state_with_optimizer(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Load adapter weights and optimizer state from a training checkpoint."""
        return self._load(path, optimizer=True)

    def save_weights_for_sampler(
        self,
        name: str | None = None,
        *,
        merge_weights: bool = False,
        ttl_seconds: int | None = None,
    ) -> APIFuture[SaveWeightsForSamplerResponse]:
        """Save sampler weights as ``tinker://<model_id>/sampler_weights/<name>``.

        ``merge_weights=True`` also writes a deployable model with the adapter merged in.
        ``name`` defaults to ``sampler-<seq_id, 6 digits>``.
        """

        def parse(data: Any) -> SaveWeightsForSamplerResponse:
            result = SaveWeightsForSamplerResponseInternal.model_validate(data)
            return SaveWeightsForSamplerResponse.model_validate({"path": result.path})

        request = SaveWeightsForSamplerRequest(
            model_id=self.model_id, path=name, ttl_seconds=ttl_seconds, merge_weights=merge_weights
        )
        return self._single("save_weights_for_sampler", request, parse, "sampler")

    def _save_ephemeral(self) -> APIFuture[str]:
        """An unnamed sampler save that opens a sampling session; yields its id."""
        sampling_seq_id = self._session.next_sampling_session_seq_id()

        def parse(data: Any) -> str:
            result = SaveWeightsForSamplerResponseInternal.model_validate(data)
            if result.sampling_session_id is None:
                raise ValueError("the server answered without a sampling_session_id")
            return result.sampling_session_id

        request = SaveWeightsForSamplerRequest(
            model_id=self.model_id, sampling_session_seq_id=sampling_seq_id
        )
        return self._single("save_weights_for_sampler", request, parse)

    def save_weights_and_get_sampling_client(
        self, name: str | None = None, *, record_stability_info: bool = False
    ) -> SamplingClient:
        """A sampler on the weights as they are after every operation sent so far.

        Without ``name`` the weights are ephemeral (not a checkpoint; they cannot be loaded for
        training); with a name they are saved durably first, as save_weights_for_sampler(name).
        ``record_stability_info``: every sample is recorded for ``stable_reinforce``
        (``SamplingClient.record_stability_info``).
        """
        if name is not None:
            path = self.save_weights_for_sampler(name).result().path
            return self.create_sampling_client(path, record_stability_info=record_stability_info)
        session_id = self._save_ephemeral().result()
        return SamplingClient(
            self._runtime,
            session_id,
            base_model=self.base_model,
            record_stability_info=record_stability_info,
        )

    def create_sampling_client(
        self, model_path: str | None = None, *, record_stability_info: bool = False
    ) -> SamplingClient:
        """A sampler on saved sampler weights, or (no path) on this live model's current adapter;
        ``record_stability_info`` as in ``save_weights_and_get_sampling_client``."""
        sampling_session_id = open_sampling_session(
            self._runtime,
            self._session,
            model_path=model_path,
            model_id=None if model_path else self.model_id,
        )
        return SamplingClient(
            self._runtime,
            sampling_session_id,
            base_model=self.base_model,
            record_stability_info=record_stability_info,
        )

    # -- the model and its session -------------------------------------------------------------

    def get_info(self) -> GetInfoResponse:
        """The model's description (base model, LoRA rank)."""
        return self._runtime.post("get_info", GetInfoResponse, {"model_id": self.model_id})

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        """The base model's tokenizer (downloaded once, then read from the local cache)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self._runtime.http, self.base_model)
        return self._tokenizer

    def unload(self) -> APIFuture[UnloadModelResponse]:
        """Release the model on the server, after the operations sent before it."""
        return self._ordered(
            "unload_model",
            lambda _: [wire(UnloadModelRequest(model_id=self.model_id))],
            0,
            UnloadModelResponse.model_validate,
            _first,
        )

    def stop(self) -> SessionInfo:
        """Stop this model's session: it stops counting against the quota."""
        return self._session.stop()

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stop_quietly(self._session, raise_errors=exc is None)

    # -- async twins: each returns the same future (or value) as its sync twin ---------------

    async def forward_async(
        self,
        data: Sequence[Datum],
        loss_fn: LossFnType = "cross_entropy",
        loss_fn_config: dict[str, float | str] | None = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Async twin of forward."""
        return self.forward(data, loss_fn, loss_fn_config)

    async def forward_backward_async(
        self,
        data: Sequence[Datum],
        loss_fn: LossFnType,
        loss_fn_config: dict[str, float | str] | None = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Async twin of forward_backward."""
        return self.forward_backward(data, loss_fn, loss_fn_config)

    async def forward_backward_custom_async(
        self, data: Sequence[Datum], loss_fn: _custom_loss.CustomLossFn
    ) -> APIFuture[ForwardBackwardOutput]:
        """Async twin of forward_backward_custom (waits for the forward pass without blocking)."""
        forward = await self.forward(_custom_loss.forward_data(data))
        linear, metrics = _custom_loss.linearize(data, forward, loss_fn)
        backward = self.forward_backward(linear, "cross_entropy")
        return CombinedAPIFuture([backward], lambda r: _custom_loss.with_metrics(r[0], metrics))

    async def optim_step_async(
        self, params: OptimParams | None = None, *, adam_params: AdamParams | None = None
    ) -> APIFuture[OptimStepResponse]:
        """Async twin of optim_step."""
        return self.optim_step(params, adam_params=adam_params)

    async def save_state_async(
        self, name: str | None = None, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """Async twin of save_state."""
        return self.save_state(name, ttl_seconds, overwrite)

    async def load_state_async(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Async twin of load_state."""
        return self.load_state(path)

    async def load_state_with_optimizer_async(self, path: str) -> APIFuture[LoadWeightsResponse]:
        """Async twin of load_state_with_optimizer."""
        return self.load_state_with_optimizer(path)

    async def save_weights_for_sampler_async(
        self,
        name: str | None = None,
        *,
        merge_weights: bool = False,
        ttl_seconds: int | None = None,
    ) -> APIFuture[SaveWeightsForSamplerResponse]:
        """Async twin of save_weights_for_sampler."""
        return self.save_weights_for_sampler(
            name, merge_weights=merge_weights, ttl_seconds=ttl_seconds
        )

    async def save_weights_and_get_sampling_client_async(
        self, name: str | None = None, *, record_stability_info: bool = False
    ) -> SamplingClient:
        """Async twin of save_weights_and_get_sampling_client."""
        if name is not None:
            path = (await self.save_weights_for_sampler(name)).path
            return await self.create_sampling_client_async(
                path, record_stability_info=record_stability_info
            )
        session_id = await self._save_ephemeral()
        return SamplingClient(
            self._runtime,
            session_id,
            base_model=self.base_model,
            record_stability_info=record_stability_info,
        )

    async def create_sampling_client_async(
        self, model_path: str | None = None, *, record_stability_info: bool = False
    ) -> SamplingClient:
        """Async twin of create_sampling_client."""
        return await asyncio.to_thread(
            functools.partial(
                self.create_sampling_client,
                model_path,
                record_stability_info=record_stability_info,
            )
        )

    async def get_info_async(self) -> GetInfoResponse:
        """Async twin of get_info."""
        return await asyncio.to_thread(self.get_info)

    async def get_tokenizer_async(self) -> PreTrainedTokenizerBase:
        """Async twin of get_tokenizer."""
        return await asyncio.to_thread(self.get_tokenizer)

    async def unload_async(self) -> APIFuture[UnloadModelResponse]:
        """Async twin of unload."""
        return self.unload()

    async def stop_async(self) -> SessionInfo:
        """Async twin of stop."""
        return await asyncio.to_thread(self.stop)
