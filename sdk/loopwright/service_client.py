"""ServiceClient: the entry point. Holds platform settings, opens sessions, makes the other clients.

Each training client gets a session of its own (named, with per-session overrides of the
platform settings); samplers made here share one default session, opened on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import pathlib
import threading
import time
import uuid
from types import TracebackType
from typing import Any

import httpx
from pydantic import ConfigDict, TypeAdapter

from ._download import download_model_package
from ._http import HTTPClient, RawBody, RetryPolicy
from ._queue import QueueProgress, describe
from ._runtime import Runtime, wire
from ._session import Session, stop_quietly
from .costs import Costs
from .errors import APIError, QueueTimeoutError
from .futures import APIFuture
from .sampling_client import SamplingClient, open_sampling_session
from .training_client import TrainingClient, check_training_path
from .types import (
    BaseModelInfo,
    CopyWeightsRequest,
    CopyWeightsResponse,
    CreateModelRequest,
    CreateModelResponse,
    CreateSessionRequest,
    CreateSessionResponse,
    DimuonOptimizerConfig,
    GetInfoResponse,
    GetServerCapabilitiesResponse,
    ListBaseModelsResponse,
    ListSessionInfosResponse,
    LoraConfig,
    OptimizerConfig,
    SessionInfo,
    VpcConfig,
    WeightsInfoResponse,
)
from .types.limits import ContextLength, Replicas

__all__ = ["ServiceClient"]

logger = logging.getLogger("loopwright")
_REPLICAS = TypeAdapter(Replicas, config=ConfigDict(title="replicas"))
_CONTEXT = TypeAdapter(ContextLength, config=ConfigDict(title="context_length"))


def _sdk_version() -> str:
    from . import __version__

    return __version__


class ServiceClient(Costs):
    """Talks to one Loopwright server with one API key. Use ``with`` so sessions stop on exit.

    The API key, server and session role come from the arguments or ``LOOPWRIGHT_API_KEY`` /
    ``LOOPWRIGHT_BASE_URL`` / ``LOOPWRIGHT_ROLE_ARN``. Nothing is sent until the first call.

    When no worker can take a new model now, the server queues it: ``queue_timeout`` is the
    longest a training client's creation waits in that queue (None: as long as it takes; each
    create may set its own), and ``queue_progress`` shows a wait that lasts (a tqdm bar when
    tqdm is installed, else a log line whenever its place changes).

    ``context_length``: the context, in tokens, of the models and samplers of the sessions it
    opens (at most each base model's maximum; None: that maximum); a model may ask for its own.

    ``report_cost=True`` prints what each session it opened cost once they stop (on close).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        role_arn: str | None = None,
        model_package_group_arn: str | None = None,
        s3_output_path: str | None = None,
        kms_key_arn: str | None = None,
        vpc_config: VpcConfig | dict[str, Any] | None = None,
        region: str | None = None,
        user_metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        project_id: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        heartbeat_interval: float = 10.0,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        queue_timeout: float | None = None,
        queue_progress: bool = True,
        context_length: int | None = None,
        report_cost: bool = False,
    ) -> None:
        # checked first, so a bad one fails before anything starts or is sent
        vpc = VpcConfig.model_validate(vpc_config) if vpc_config is not None else None
        if context_length is not None:
            context_length = _CONTEXT.validate_python(context_length)
        if queue_timeout is not None and queue_timeout <= 0:
            raise ValueError(f"queue_timeout must be positive seconds, not {queue_timeout}")
        http = HTTPClient(
            base_url,
            api_key,
            timeout=timeout,
            retry=retry,
            transport=transport,
            user_agent=f"loopwright-python/{_sdk_version()}",
        )
        self._runtime = Runtime(http, heartbeat_interval, _sdk_version())
        self.region = region
        """Accepted for the published examples; a Loopwright server serves one region."""
        self._settings: dict[str, Any] = {
            "role_arn": role_arn or os.environ.get("LOOPWRIGHT_ROLE_ARN") or None,
            "model_package_group_arn": model_package_group_arn,
            "s3_output_path": s3_output_path,
            "kms_key_arn": kms_key_arn,
            "vpc_config": vpc,
            "context_length": context_length,
        }
        self._queue_timeout = queue_timeout
        self._queue_progress = self._runtime.queue_progress = queue_progress
        self._report_cost = report_cost
        self._user_metadata = user_metadata
        self._tags = list(tags or [])
        self._project_id = project_id
        self._lock = threading.Lock()
        self._sessions: list[Session] = []
        self._default_session: Session | None = None

    @property
    def base_url(self) -> str:
        """The server root, e.g. http://127.0.0.1:8000."""
        return self._runtime.http.base_url

    # -- sessions ------------------------------------------------------------------------------

    def _open_session(self, name: str | None = None, **overrides: Any) -> Session:
        """Open a session with the platform settings, ``overrides`` winning where not None."""
        settings = {
            key: overrides.get(key) if overrides.get(key) is not None else value
            for key, value in self._settings.items()
        }
        request = CreateSessionRequest(
            tags=self._tags,
            user_metadata=self._user_metadata,
            sdk_version=_sdk_version(),
            project_id=self._project_id,
            name=name,
            role_arn=settings["role_arn"],
            model_package_group_arn=settings["model_package_group_arn"],
            s3_output_path=settings["s3_output_path"],
            kms_key_arn=settings["kms_key_arn"],
            vpc_config=settings["vpc_config"],
            context_length=settings["context_length"],
        )
        answer = self._runtime.post("create_session", CreateSessionResponse, wire(request))
        for level, message in (
            (logging.INFO, answer.info_message),
            (logging.WARNING, answer.warning_message),
            (logging.ERROR, answer.error_message),
        ):
            if message:
                logger.log(level, message)
        session = Session(self._runtime.http, self._runtime.heartbeat, answer.session_id)
        with self._lock:
            self._sessions.append(session)
        return session

    def _session(self) -> Session:
        with self._lock:
            session = self._default_session
        if session is None or session.stopped:
            session = self._open_session()
            with self._lock:
                self._default_session = session
        return session

    @property
    def session_id(self) -> str:
        """The default session (for samplers made here), opened on first use."""
        return self._session().session_id

    def _default_session_id(self) -> str:
        return self.session_id

    def list_sessions(self) -> list[SessionInfo]:
        """The caller's sessions, newest first."""
        return self._runtime.get("sessions", ListSessionInfosResponse).sessions

    def get_session(self, session_id: str) -> SessionInfo:
        """One session's state."""
        return self._runtime.get(f"sessions/{session_id}", SessionInfo)

    # -- the catalog ---------------------------------------------------------------------------

    def list_base_models(self) -> list[BaseModelInfo]:
        """The base models the server trains and samples."""
        return self._runtime.get("base_models", ListBaseModelsResponse).base_models

    def get_server_capabilities(self) -> GetServerCapabilitiesResponse:
        """The server's supported models, as the tinker protocol reports them."""
        return self._runtime.get("get_server_capabilities", GetServerCapabilitiesResponse)

    # -- training clients ----------------------------------------------------------------------

    def create_lora_training_client(
        self,
        base_model: str,
        *,
        training_session_name: str | None = None,
        rank: int = 32,
        alpha: float | None = None,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        train_projector: bool = False,
        role_arn: str | None = None,
        model_package_group_arn: str | None = None,
        s3_output_path: str | None = None,
        kms_key_arn: str | None = None,
        vpc_config: VpcConfig | dict[str, Any] | None = None,
        user_metadata: dict[str, Any] | None = None,
        replicas: int | None = None,
        optimizer: OptimizerConfig | None = None,
        queue_timeout: float | None = None,
        context_length: int | None = None,
    ) -> TrainingClient:
        """Open a session and create a fresh LoRA adapter on ``base_model`` in it.

        ``alpha`` defaults to the server's 32; the platform settings given here override the
        client's for this session only. ``replicas``: the workers the model trains on, data
        parallel (None: the server's 1; at most the account's ``max_replicas`` quota and the
        live workers of the base model, else a ``BadRequestError`` naming ``replicas``).
        ``optimizer``: ``AdamOptimizerConfig()`` (None means the same) or
        ``DimuonOptimizerConfig()``, fixed for the model's lifetime; its steps then take
        ``AdamParams`` or ``DimuonParams``. Blocks until the model exists: while no worker
        can take it, it waits in the server's placement queue (shown as the client's
        ``queue_progress`` says) for at most ``queue_timeout`` seconds (None: the client's),
        then raises ``QueueTimeoutError`` and stops the session it opened.
        ``context_length``: the context its requests are held to, in tokens, at most the base
        model's maximum (tinker's ``<base>:peft:<n>`` names ask the same); None: the client's,
        else that maximum. ``train_projector``: a vision-language base model's projector is
        adapted too (a text base model answers ``BadRequestError`` naming it).
        """
        if not (train_mlp or train_attn or train_unembed):
            raise ValueError("at least one of train_mlp, train_attn, train_unembed must be True")
        lora = LoraConfig(
            rank=rank,
            alpha=alpha,
            seed=seed,
            train_mlp=train_mlp,
            train_attn=train_attn,
            train_unembed=train_unembed,
            train_projector=train_projector,
        )
        if replicas is not None:  # checked before a session is opened, as the adapter is
            replicas = _REPLICAS.validate_python(replicas)
        if context_length is not None:
            context_length = _CONTEXT.validate_python(context_length)
        session = self._open_session(
            training_session_name,
            role_arn=role_arn,
            model_package_group_arn=model_package_group_arn,
            s3_output_path=s3_output_path,
            kms_key_arn=kms_key_arn,
            vpc_config=vpc_config,
        )
        request = CreateModelRequest(
            session_id=session.session_id,
            model_seq_id=session.next_model_seq_id(),
            base_model=base_model,
            user_metadata=user_metadata,
            lora_config=lora,
            replicas=replicas,
            optimizer_config=optimizer,
            context_length=context_length,
        )
        limit = queue_timeout if queue_timeout is not None else self._queue_timeout
        progress = QueueProgress(f"model on {base_model}", show=self._queue_progress)
        try:
            created = _created(
                self._runtime.operation(
                    "create_model",
                    wire(request),
                    CreateModelResponse.model_validate,
                    progress.heard,
                ),
                progress,
                limit,
            )
        except BaseException:
            # do not leave it counting against the quota (or waiting in the queue)
            stop_quietly(session, raise_errors=False)
            raise
        finally:
            progress.close()
        return TrainingClient(self._runtime, session, created.model_id, base_model)

    def create_training_client(self, model_id: str) -> TrainingClient:
        """A training client on an existing model of the caller's account (one made in the
        dashboard, or by another script): its requests continue after the last one the model
        received, in its own session, which this client keeps alive while it is open and leaves
        open when it closes (it did not start it).

        Two clients sending to one model at once would take the same seq_ids; attach only
        where no one else is sending.
        """
        info = self._runtime.post("get_info", GetInfoResponse, {"model_id": model_id})
        if info.session_id is None or info.next_seq_id is None:
            raise ValueError(f"{model_id}: the server does not say where its requests continue")
        # the session's samplers so far are another client's: ours take the numbers after them
        session = Session(
            self._runtime.http,
            self._runtime.heartbeat,
            info.session_id,
            next_sampling_session_seq_id=info.next_sampling_session_seq_id or 0,
        )
        base_model = info.model_name or info.model_data.tokenizer_id or ""
        return TrainingClient(
            self._runtime, session, info.model_id, base_model, next_seq_id=info.next_seq_id
        )

    def _from_state(self, path: str, optimizer: bool, **options: Any) -> TrainingClient:
        check_training_path(path)
        info = self._runtime.post("weights_info", WeightsInfoResponse, {"tinker_path": path})
        if optimizer and info.optimizer == "dimuon":  # its state resumes in a Dimuon model
            options.setdefault("optimizer", DimuonOptimizerConfig())
        client = self.create_lora_training_client(
            info.base_model,
            rank=info.lora_rank or 32,
            train_mlp=info.train_mlp if info.train_mlp is not None else True,
            train_attn=info.train_attn if info.train_attn is not None else True,
            train_unembed=info.train_unembed if info.train_unembed is not None else True,
            train_projector=bool(info.train_projector),
            **options,
        )
        try:
            (client.load_state_with_optimizer if optimizer else client.load_state)(path).result()
        except BaseException:
            with contextlib.suppress(APIError):
                client.stop()
            raise
        return client

    def create_training_client_from_state(self, path: str, **options: Any) -> TrainingClient:
        """A new training client whose adapter is loaded from a training checkpoint (its
        ``tinker://`` path, or the ARN of a model package version that holds one).

        The optimizer starts afresh (AdamW unless ``optimizer`` says otherwise); ``options``
        are create_lora_training_client's keywords (session name, platform settings,
        user_metadata, optimizer).
        """
        return self._from_state(path, False, **options)

    def create_training_client_from_state_with_optimizer(
        self, path: str, **options: Any
    ) -> TrainingClient:
        """A new training client resuming adapter and optimizer state from a checkpoint, with
        the optimizer family the checkpoint was saved with."""
        return self._from_state(path, True, **options)

    # -- sampling clients ----------------------------------------------------------------------

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        *,
        record_stability_info: bool = False,
    ) -> SamplingClient:
        """A sampler on saved sampler weights (``tinker://...`` or a model package version's ARN)
        or on a base model; with ``record_stability_info`` every sample is recorded for
        ``stable_reinforce`` (``SamplingClient.record_stability_info``)."""
        sampling_session_id = open_sampling_session(
            self._runtime, self._session(), model_path=model_path, base_model=base_model
        )
        return SamplingClient(
            self._runtime,
            sampling_session_id,
            base_model=base_model,
            model_path=model_path,
            record_stability_info=record_stability_info,
        )

    # -- the model package registry -----------------------------------------------------------

    def download_model_package(
        self,
        ref: str,
        dest_dir: str | os.PathLike[str],
        *,
        format: str = "adapter",
        include_optimizer: bool = False,
    ) -> pathlib.Path:
        """Download a model package version (its ARN or ``tinker://`` path) into ``dest_dir``
        and return the extracted folder.

        ``format="adapter"``: ``adapter_model.safetensors`` and ``adapter_config.json`` (plain
        peft loads the folder) and ``loopwright.json``, with ``optimizer.safetensors`` when
        ``include_optimizer`` (training state only). ``format="merged"``: the merged model that
        plain transformers loads (versions saved with ``merge_weights=True``).
        """
        http = self._runtime.http
        return download_model_package(
            http, ref, dest_dir, format=format, include_optimizer=include_optimizer
        )

    def copy_weights(
        self,
        path: str,
        *,
        session_id: str | None = None,
        model_seq_id: int | None = None,
        ttl_seconds: int | None = None,
    ) -> str:
        """Copy a checkpoint (a ``tinker://`` path of either kind, or a model package version's
        ARN) inside the account; returns the copy's path. The copy is a training run of its own
        (in ``session_id``'s slot ``model_seq_id``, else in the account's ``checkpoint copies`` session) that holds the
        weights: resume from it with ``create_training_client_from_state_with_optimizer`` or
        sample from it. It has files of its own (deleting either never touches the other) and
        expires after ``ttl_seconds`` if given. Retries after a lost answer make one copy."""
        request = CopyWeightsRequest(
            source_path=path,
            session_id=session_id,
            model_seq_id=model_seq_id,
            destination_project_id=None if session_id is not None else "default",
            ttl_seconds=ttl_seconds,
        )
        body = RawBody(
            json.dumps(request.model_dump(mode="json", exclude_none=True)).encode(),
            {"Content-Type": "application/json", "X-Idempotency-Key": str(uuid.uuid4())},
        )
        answer = self._runtime.http.request("POST", "copy_weights", body=body).json()
        return CopyWeightsResponse.model_validate(answer).tinker_path

    # -- async twins ---------------------------------------------------------------------------

    async def copy_weights_async(self, path: str, **options: Any) -> str:
        """Async twin of copy_weights (same keywords)."""
        return await asyncio.to_thread(self.copy_weights, path, **options)

    async def download_model_package_async(
        self, ref: str, dest_dir: str | os.PathLike[str], **options: Any
    ) -> pathlib.Path:
        """Async twin of download_model_package (same keywords)."""
        return await asyncio.to_thread(self.download_model_package, ref, dest_dir, **options)

    async def create_lora_training_client_async(
        self, base_model: str, **options: Any
    ) -> TrainingClient:
        """Async twin of create_lora_training_client (same keywords)."""
        return await asyncio.to_thread(self.create_lora_training_client, base_model, **options)

    async def create_training_client_from_state_async(
        self, path: str, **options: Any
    ) -> TrainingClient:
        """Async twin of create_training_client_from_state."""
        return await asyncio.to_thread(self.create_training_client_from_state, path, **options)

    async def create_training_client_from_state_with_optimizer_async(
        self, path: str, **options: Any
    ) -> TrainingClient:
        """Async twin of create_training_client_from_state_with_optimizer."""
        return await asyncio.to_thread(
            self.create_training_client_from_state_with_optimizer, path, **options
        )

    async def create_sampling_client_async(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        *,
        record_stability_info: bool = False,
    ) -> SamplingClient:
        """Async twin of create_sampling_client."""
        return await asyncio.to_thread(
            functools.partial(
                self.create_sampling_client,
                model_path,
                base_model,
                record_stability_info=record_stability_info,
            )
        )

    async def list_base_models_async(self) -> list[BaseModelInfo]:
        """Async twin of list_base_models."""
        return await asyncio.to_thread(self.list_base_models)

    async def get_server_capabilities_async(self) -> GetServerCapabilitiesResponse:
        """Async twin of get_server_capabilities."""
        return await asyncio.to_thread(self.get_server_capabilities)

    # -- shutting down -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every session this client opened (training clients' included)."""
        with self._lock:
            sessions = [s for s in self._sessions if not s.stopped]
        errors: list[APIError] = []
        for session in sessions:
            try:
                session.stop()
            except APIError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Cancel pending futures, stop the sessions, end the threads and close connections."""
        try:
            self._runtime.cancel_pending()  # first, so pending futures fail as "closed"
            self.stop()
            if self._report_cost:
                self._print_final_costs()
        finally:
            self._runtime.close()

    def _print_final_costs(self) -> None:
        """Each session this client opened: its cost at its end."""
        with self._lock:
            opened = [s.session_id for s in self._sessions]
        for session_id in opened:
            try:
                print(self.get_session_usage(session_id).describe("in all"))
            except APIError as error:
                logger.warning("could not read the cost of %s: %s", session_id, error)

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except APIError as error:
            if exc is None:
                raise
            logger.warning("could not stop every session on exit: %s", error)


def _created(
    future: APIFuture[CreateModelResponse], progress: QueueProgress, limit: float | None
) -> CreateModelResponse:
    """The create's result; past ``limit`` seconds while it still waits in the placement queue,
    ``QueueTimeoutError`` (a model that has left the queue for a worker is waited for)."""
    if limit is None:
        return future.result()
    deadline = time.monotonic() + limit
    while True:
        remaining = deadline - time.monotonic()
        try:
            return future.result(timeout=remaining if remaining > 0 else 0.5)
        except TimeoutError:
            if time.monotonic() >= deadline and progress.last is not None:
                last = progress.last
                raise QueueTimeoutError(
                    f"{progress.what} waited {limit:g} s in the placement queue and left it: "
                    f"{describe(last)} ({last.reason})",
                    last,
                ) from None
