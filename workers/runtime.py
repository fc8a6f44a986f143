"""A worker process: one engine host, registered in the fleet, draining its operations.

``drain()`` runs until nothing on this worker is runnable: each training model's next
operation in seq order, then the pending samples in one batch per adapter. It reads all work
from the database, so the broker message that woke it carries no state.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from django.db import DatabaseError, close_old_connections, transaction

from controlplane import dispatch
from controlplane.fleet import services as fleet
from controlplane.kms import providers as kms_providers
from controlplane.kms.selectors import key_ref_by_arn
from controlplane.metering.services import datum_tokens, input_tokens
from controlplane.training_sessions.services import execution, placement
from controlplane.training_sessions.services.storage import storage_at

from .cpu_threads import cpu_threads, threads_for
from .engine.host import HostConfig, ModelHost
from .executor import Outcome, SamplerAdapters, classify, run_samples, run_training
from .sealing import Vault
from .wake import WakeListener

log = logging.getLogger("loopwright.worker")

SAMPLE_BATCH = 64
HEARTBEAT_SECONDS = 5.0
SEQ_GAP_SECONDS = float(os.environ.get("LOOPWRIGHT_SEQ_GAP_SECONDS", "120"))


@dataclass(frozen=True)
class WorkerSettings:
    name: str
    base_model: str
    device: str = "cpu"
    dtype: str | None = None
    capacity: int = 16
    max_loaded_adapters: int = 16
    release_slack_mb: int = 256  # growth after which freed heap goes back to the OS
    scratch_dir: Path | None = None  # plaintext checkpoints in flight; system temp if None
    subnet_ids: tuple[str, ...] = ()  # the VPC subnets it reaches; none: the open network
    security_group_ids: tuple[str, ...] = ()

    @property
    def queue(self) -> str:
        return f"gpu.{self.name}"

    @classmethod
    def from_env(cls) -> WorkerSettings:
        env = os.environ
        return cls(
            name=env.get("LOOPWRIGHT_WORKER_NAME", socket.gethostname()),
            base_model=env.get("LOOPWRIGHT_WORKER_BASE_MODEL", "loopwright/tiny-byte-llama"),
            device=env.get("LOOPWRIGHT_WORKER_DEVICE", "cpu"),
            dtype=env.get("LOOPWRIGHT_WORKER_DTYPE") or None,
            capacity=int(env.get("LOOPWRIGHT_WORKER_CAPACITY", "16")),
            max_loaded_adapters=int(env.get("LOOPWRIGHT_WORKER_MAX_LOADED", "16")),
            release_slack_mb=int(env.get("LOOPWRIGHT_WORKER_RELEASE_SLACK_MB", "256")),
            scratch_dir=Path(env["LOOPWRIGHT_WORKER_SCRATCH_DIR"])
            if env.get("LOOPWRIGHT_WORKER_SCRATCH_DIR")
            else None,
            subnet_ids=_listed(env.get("LOOPWRIGHT_WORKER_SUBNETS", "")),
            security_group_ids=_listed(env.get("LOOPWRIGHT_WORKER_SECURITY_GROUPS", "")),
        )


def work_tokens(kind: str, payload: dict) -> int | None:
    """Tokens an operation puts through the model (sampling: the prompt and every new token it
    may generate); None for kinds whose work is not counted in tokens."""
    if kind == "forward_backward":
        return datum_tokens((payload.get("forward_backward_input") or {}).get("data") or ())
    if kind == "forward":
        return datum_tokens((payload.get("forward_input") or {}).get("data") or ())
    if kind == "sample":
        params = payload.get("sampling_params") or {}
        new = int(payload.get("num_samples") or 1) * int(params.get("max_tokens") or 0)
        return input_tokens(payload.get("prompt") or {}) + new
    return None


def _listed(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


class WorkerRuntime:
    def __init__(
        self,
        settings: WorkerSettings,
        *,
        host: ModelHost | None = None,
        heartbeat: bool = True,
        listen: bool | None = None,
    ) -> None:
        """``listen``: wake on PostgreSQL notices (default: when submits send them and the
        runtime runs on its own, i.e. with its heartbeat)."""
        self.settings = settings
        self.host = host or ModelHost(
            settings.base_model,
            HostConfig(
                device=settings.device,
                dtype=settings.dtype,
                max_loaded_adapters=settings.max_loaded_adapters,
                release_slack_mb=settings.release_slack_mb,
            ),
        )
        self._parameters = sum(  # the base model's, not the adapter slots'
            p.numel() for name, p in self.host.pool.model.named_parameters() if "lora_" not in name
        )
        self._usual_threads = torch.get_num_threads()
        self.samplers = SamplerAdapters(
            limit=int(os.environ.get("LOOPWRIGHT_WORKER_SAMPLER_ADAPTERS", "8"))
        )
        # One transaction: no model is placed here before what a previous process left is failed.
        with transaction.atomic():
            self.worker = self._register()
            recovered = execution.recover_worker(worker=self.worker)
        if recovered:
            log.warning("failed %d operations left running by a previous process", recovered)
        self._place_waiting()
        self._stop = threading.Event()
        self._lost: set[str] = set()  # models whose state here the database no longer matches
        self._unrecorded: set[str] = set()  # samples that ran but could not be recorded
        # One drain at a time: the Celery task and the wake listener both call drain().
        self._drain_lock = threading.Lock()
        self.wake: WakeListener | None = None
        if heartbeat:
            threading.Thread(target=self._heartbeat, name="worker-heartbeat", daemon=True).start()
        if listen if listen is not None else heartbeat and dispatch.wakes_by_notify():
            self.wake = WakeListener(settings.queue, self.drain, self._stop).start()

    def _register(self):
        m = self.host.materialized
        files = {name: path.read_text() for name, path in m.tokenizer_files.items()}
        return fleet.worker_register(
            name=self.settings.name,
            queue=self.settings.queue,
            base_model=self.settings.base_model,
            description=m.spec.description,
            context_length=self.host.context_length,
            chat_template=m.chat_template,
            tokenizer_files=files,
            tokenizer_path=str(m.path),
            capacity=self.settings.capacity,
            device=self.settings.device,
            subnet_ids=self.settings.subnet_ids,
            security_group_ids=self.settings.security_group_ids,
        )

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.beat()
            except Exception:  # a database hiccup must not kill the heartbeat
                log.exception("heartbeat failed")
            finally:
                close_old_connections()

    def _place_waiting(self) -> None:
        placed = placement.models_place_waiting(base_model=self.settings.base_model)
        if placed:
            log.info("placed %d models that waited for a worker", len(placed))

    def beat(self) -> None:
        """One heartbeat: alive; models waiting for a worker like this one are placed (room may
        have freed); a lost nudge or a seq gap to time out gets another look."""
        fleet.worker_heartbeat(name=self.settings.name)
        if (self._lost or self._unrecorded) and self._drain_lock.acquire(blocking=False):
            try:  # the database answers again: fail what it could not record
                self._fail_lost()
            finally:
                self._drain_lock.release()
        self._place_waiting()
        if execution.has_waiting_work(worker=self.worker):
            if self.wake is not None:
                self.wake.poke()
                return
            dispatch.celery_client().send_task(dispatch.DRAIN_TASK, queue=self.settings.queue)

    def shutdown(self) -> None:
        self._stop.set()
        with self._drain_lock:  # an operation in flight finishes and is recorded first
            fleet.worker_retire(name=self.settings.name)

    # -- work ------------------------------------------------------------------------------
    def drain(self) -> int:
        """Run everything runnable; returns how many operations ran."""
        with self._drain_lock:
            if self._stop.is_set():
                return 0
            return self._drain()

    def _drain(self) -> int:
        ran = 0
        while True:
            self._fail_lost()
            progressed, idle = self._pass()
            if not progressed and not idle:
                # Nothing runnable: step over refused or long-missing seq_ids, then look again.
                progressed = execution.settle_gaps(worker=self.worker, gap_seconds=SEQ_GAP_SECONDS)
            ran += progressed
            if idle or not progressed:
                return ran

    def _pass(self) -> tuple[int, bool]:
        """One pass: the next operation of each training model (one per model), then a batch
        of samples. Returns how many ran, and whether the look after a piece of work (made by
        a plain completion's own statement, else one cheap query) found nothing at all waiting
        (then the other claims are not even tried)."""
        progressed = 0
        served: list[str] = []
        while op := execution.claim_next_training(worker=self.worker, skip=served):
            waiting = self._finish(op, self._training(op))
            served.append(op.model_id)
            progressed += 1
            if not (self._waiting() if waiting is None else waiting):
                return progressed, True
        claimed = execution.claim_samples(worker=self.worker, limit=SAMPLE_BATCH)
        if claimed:
            self._samples(claimed)
            progressed += len(claimed)
            if not self._waiting():
                return progressed, True
        return progressed, False

    def _waiting(self) -> bool:
        return execution.has_waiting_work(worker=self.worker, older_than_seconds=None)

    def _samples(self, claimed: list) -> None:
        tokens = sum(work_tokens(op.kind, op.payload) or 0 for op in claimed)
        with self._threads(tokens):
            outcomes = run_samples(
                self.host,
                [(op.payload, op.plan) for op in claimed],
                self.samplers,
                [self.vault(op.tenant_id) for op in claimed],
            )
        lost: DatabaseError | None = None
        for op, outcome in zip(claimed, outcomes, strict=True):
            if lost is not None:  # the database went away: fail the rest later too
                self._unrecorded.add(op.pk)
                continue
            try:
                self._finish(op, outcome)
            except DatabaseError as exc:
                lost = exc
        if lost is not None:
            raise lost

    def _threads(self, tokens: int | None):
        """The torch threads for an engine call processing ``tokens`` (None: unknown)."""
        if self.settings.device != "cpu" or tokens is None:
            return cpu_threads(self._usual_threads)
        return cpu_threads(threads_for(tokens, self._parameters, self._usual_threads))

    def _training(self, op) -> Outcome:
        started = time.perf_counter()
        try:
            with self._threads(work_tokens(op.kind, op.payload)):
                result = run_training(
                    self.host, op.kind, op.payload, op.plan, self.vault(op.tenant_id)
                )
            outcome = Outcome(result=result)
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

    def vault(self, tenant_id) -> Vault:
        """Seals and opens checkpoints with the tenant's keys, as the database holds them now;
        storage (S3 endpoint and region) as this worker's settings say."""
        return Vault(
            lookup=lambda arn: key_ref_by_arn(tenant_id=tenant_id, arn=arn),
            provider=kms_providers.provider,
            scratch_root=self.settings.scratch_dir,
            stores=storage_at,
        )

    def _finish(self, op, outcome: Outcome) -> bool | None:
        """Record what became of ``op``; whether other work waited on the worker then (None:
        not known)."""
        try:
            if outcome.ok:
                return execution.complete(op, outcome.result or {})
            execution.fail(op, outcome.error or "failed", outcome.category)
            return None
        except execution.ClaimLost:
            if op.model_id is not None:
                self._lost.add(op.model_id)
                raise
            # a sample changes nothing on the host: pending again, it simply runs again
            log.warning("sample %s lost its claim; it will run again", op.pk)
            return None
        except DatabaseError:
            # The engine ran it, the database did not take the result: this host's state of
            # the model no longer matches the database. Nothing more runs on it; it is failed
            # as soon as the database answers again. A sample is failed too (retryably),
            # rather than left running.
            if op.model_id is not None:
                self._lost.add(op.model_id)
            else:
                self._unrecorded.add(op.pk)
            raise

    def _fail_lost(self) -> None:
        for model_id in sorted(self._lost):
            execution.model_lost(
                model_id=model_id, why="an operation ran but its result could not be recorded"
            )
            if self.host.has_adapter(model_id):
                self.host.remove_adapter(model_id)
            self._lost.discard(model_id)
        for request_id in sorted(self._unrecorded):
            execution.fail_unrecorded(
                request_id=request_id, why="its result could not be recorded; retry it"
            )
            self._unrecorded.discard(request_id)
