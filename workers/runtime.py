"""A worker process: one engine host, registered in the fleet under a lease, draining its
operations.

``drain()`` runs passes until nothing on this worker is runnable: each pass claims every
training model's next operation in seq order and a fair share of the pending samples, and runs
them packed into few engine calls (``passes``, ``scheduling``). It reads all work from the
database, so the broker message that woke it carries no state. A model this host does
not hold (it moved here from a lost worker, or a result could not be recorded) is restored from
its recovery point before it runs anything. Every claim and completion is fenced by the lease's
generation: a worker declared dead drops what it holds and registers anew.

``WorkerRuntime`` composes the worker's jobs: loading its host (``host_loading``), its lease
(``lease``) and the heartbeat that renews it (``heartbeat``), recording outcomes
(``recording``), restoring models (``restoring``), running one operation (``running``), one
pass (``passes``), the drain (``draining``), and the replica group it takes part in
(``group_member``, ``replication``); it owns the host and the sampler weights they share.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from typing import Any

import torch
from django.conf import settings as django_settings

from controlplane import dispatch
from controlplane import worker_port as port

from .draining import Drainer
from .engine.catalog import default_catalog
from .engine.host import ModelHost
from .engine.snapshots import Snapshot
from .executor import SamplerAdapters
from .group_member import GroupMember
from .heartbeat import Heartbeat
from .host_loading import fitted, load_host
from .lease import Lease
from .passes import PassContext
from .recording import Recorder
from .replicated_host import ReplicatedHost
from .replication import Replicas
from .restoring import Restorer
from .running import Runner
from .scheduling import Scheduler
from .sealing import Vault
from .settings import WorkerSettings
from .snapshots import Snapshots
from .wake import WakeListener

log = logging.getLogger("loopwright.worker")


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
        materialized = (
            host.materialized if host else default_catalog().materialize(settings.base_model)
        )
        # Whether its memory holds the base whole, or it serves only in a sharded group.
        self.fit, self.shard_ranks = fitted(settings, materialized)
        self.host = host or load_host(settings, self.fit)
        parameters = sum(  # the base model's, not the adapter slots'
            p.numel() for name, p in self.host.pool.model.named_parameters() if "lora_" not in name
        )
        self.samplers = SamplerAdapters(limit=settings.sampler_adapters)
        self.snapshots = Snapshots(
            self.host,
            self.vault,
            every_steps=_or(settings.snapshot_every_steps, django_settings.SNAPSHOT_EVERY_STEPS),
            every_seconds=_or(
                settings.snapshot_every_seconds, django_settings.SNAPSHOT_EVERY_SECONDS
            ),
        )
        self.host.on_evict = self._evicted
        # What the operations run on: the host, or a replica group for data-parallel models.
        self.replicas = Replicas(self.shard_ranks)
        self.replicated = self.replicas.replicated
        self.engine = ReplicatedHost(self.host, self.replicated, sharded_base=self.shard_ranks > 1)
        self.group = GroupMember(self)
        self.scheduler = Scheduler(settings.pass_tokens)
        # By job: the lease, recording outcomes, restoring models, running an operation.
        self.lease = Lease(self._start, settings.base_model)
        self.recorder = Recorder(self.snapshots, self.lease)
        self.restorer = Restorer(
            self.lease,
            self.engine,
            self.snapshots,
            worker_name=settings.name,
            vault=self.vault,
            threads=lambda kind, payload: self.runner.op_threads(kind, payload),
        )
        self.runner = Runner(
            self.engine,
            device=settings.device,
            parameters=parameters,
            usual_threads=torch.get_num_threads(),
            vault=self.vault,
            held=self.restorer.held,
        )
        self.drainer = Drainer(
            self.lease,
            self.recorder,
            self.restorer,
            self.snapshots,
            context=self.pass_context,
            reset=self._reset,
        )
        self.heartbeat = Heartbeat(
            self.lease,
            self.drainer,
            self.recorder,
            self.restorer,
            self.snapshots,
            self.group,
            name=settings.name,
            reset=self._reset,
            poke=self.poke,
        )
        self.lease.register()
        self.wake: WakeListener | None = None
        if heartbeat:
            self.heartbeat.start()
        if listen if listen is not None else heartbeat and dispatch.wakes_by_notify():
            self.wake = WakeListener(settings.queue, self.drain, self.lease.stop).start()

    def reload_base(self) -> None:
        """A worker that sharded its base left its group: the base is loaded whole again (into
        host memory) for the next group to shard. The caller holds the drain lock."""
        log.warning("worker %s loads %s again for its next group", self.name, self.host.base_model)
        host = load_host(self.settings, self.fit)  # the sharded one serves readers meanwhile
        host.on_evict = self._evicted
        self.host = self.engine.host = self.snapshots.host = host
        self.samplers = SamplerAdapters(limit=self.samplers.limit)
        gc.collect()  # the sharded base's pieces

    def _evicted(self, model_id: str, state: Snapshot) -> None:
        """The host unloaded ``model_id`` for room: its state goes to a snapshot."""
        self.snapshots.evicted(model_id, state, self.fence)

    # -- the lease (``lease``) and the heartbeat (``heartbeat``) --------------------------------
    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def fence(self) -> port.Fence:
        return self.lease.fence

    @property
    def worker(self) -> port.Worker:
        return self.lease.worker

    def _start(self) -> port.Registration:
        """Register this worker, its base model and its room in the fleet."""
        m = self.host.materialized
        files = {name: path.read_text() for name, path in m.tokenizer_files.items()}
        return port.worker_start(
            by=f"worker {self.name}",
            name=self.name,
            queue=self.settings.queue,
            base_model=self.settings.base_model,
            description=m.spec.description,
            context_length=self.host.context_length,
            vocab_size=self.host.vocab_size,
            image_tokens=None if self.host.vision is None else self.host.vision.tokens_per_image,
            chat_template=m.chat_template,
            tokenizer_files=files,
            tokenizer_path=str(m.path),
            capacity=self.settings.capacity,
            device=self.settings.device,
            subnet_ids=self.settings.subnet_ids,
            security_group_ids=self.settings.security_group_ids,
            address=self.settings.address,
            memory_bytes=self.fit.memory_bytes,
            shard_ranks=self.shard_ranks,
            base_memory_bytes=self.fit.whole_bytes,
        )

    def _reset(self) -> None:
        """The lease was taken away (a long pause, a partition): whatever this process holds
        may have moved on elsewhere. Drop it all and register anew, empty. Under the drain lock."""
        log.warning(
            "worker %s lost its lease (generation %s); starting empty",
            self.name,
            self.fence.generation,
        )
        self.group.teardown()
        for adapter in list(self.host.pool.ids()):
            self.host.remove_adapter(adapter)
        self.samplers = SamplerAdapters(limit=self.samplers.limit)
        self.snapshots.forget()
        self.recorder.forget()
        self.restorer.forget()
        self.lease.register()

    def lease_held(self) -> bool:
        """Whether this worker takes work now (the readiness probe): ``Lease.held``."""
        return self.lease.held()

    def heartbeat_age(self) -> float:
        """Seconds since the heartbeat thread last finished a beat (the liveness probe)."""
        return self.lease.heartbeat_age()

    def beat(self) -> None:
        """One heartbeat (``Heartbeat.beat``)."""
        self.heartbeat.beat()

    def request_stop(self) -> None:
        """Stop taking work: the operation running now is the last (a SIGTERM asks this)."""
        self.lease.stop.set()

    def shutdown(self) -> None:
        """Stop within ``WORKER_STOP_SECONDS``: finish the running operation, snapshot every
        model changed since its recovery point, hand the models over to live workers."""
        deadline = time.monotonic() + django_settings.WORKER_STOP_SECONDS
        self.lease.stop.set()
        with self.drainer.locked(timeout=max(0.0, deadline - time.monotonic())) as locked:
            if locked and not self.lease.fenced.is_set():
                for model_id in self.snapshots.dirty():
                    self.snapshots.take(model_id, self.fence)
                log.warning("worker %s stopping: snapshotting its changed models", self.name)
                self.snapshots.flush(max(0.0, deadline - time.monotonic()))
            moved = port.hand_over(fence=self.fence, by=f"worker {self.name}")
            log.warning("worker %s stopped; %d model(s) handed over", self.name, moved)

    # -- work ------------------------------------------------------------------------------
    def drain(self) -> int:
        """Run everything runnable (``draining.Drainer``); returns how many operations ran."""
        return self.drainer.drain()

    def pass_context(self) -> PassContext:
        """What a pass sees of this worker now."""
        return PassContext(
            worker=self.worker,
            fence=self.fence,
            sample_limit=self.settings.pass_samples,
            scheduler=self.scheduler,
            host=self.host,
            engine=self.engine,
            samplers=lambda: self.samplers,
            recorder=self.recorder,
            stopping=self.lease.stop.is_set,
            threads=self.runner.threads,
            vault=self.vault,
            replicated=self.replicated,
            ready=self.restorer.ready,
            held=self.restorer.held,
            restore=self.restorer.restore,
            train=self.runner.train,
        )

    # -- replica groups --------------------------------------------------------------------
    def drop_replicated(self) -> None:
        """The replica group ended: its models' state on this host no longer counts (another
        rank may have gone mid-operation); they come back from their recovery points."""
        self.replicas.drop(self.host, self.snapshots)
        if self.shard_ranks > 1:  # its sampler weights were the group's too
            self.samplers = SamplerAdapters(limit=self.samplers.limit)

    def drain_lock(self, *, blocking: bool = True) -> contextlib.AbstractContextManager[bool]:
        """The drain lock, as a context that says whether it was taken."""
        return self.drainer.locked(blocking=blocking)

    def poke(self) -> None:
        """Have the drain look for work now."""
        if self.wake is not None:
            self.wake.poke()
        else:
            dispatch.celery_client().send_task(dispatch.DRAIN_TASK, queue=self.settings.queue)

    def vault(self, tenant_id) -> Vault:
        """Seals and opens checkpoints with the tenant's keys, as the database holds them now;
        storage (S3 endpoint and region) as this worker's settings say."""
        return Vault(
            lookup=lambda arn: port.key_ref(tenant_id=tenant_id, arn=arn),
            provider=port.key_provider,
            scratch_root=self.settings.scratch_dir,
            stores=port.storage_at,
        )


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
