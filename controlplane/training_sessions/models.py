"""A session holds training models and samplers; every GPU-bound call is an Operation row.

A training model's operations carry ``seq_id`` (create_model is 0, the client's requests 1, 2,
…) and run strictly in that order; ``next_seq`` is the next one to run.
"""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q

from controlplane.fleet.models import Worker
from controlplane.tenants.models import Tenant


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


class Session(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        ACTIVE = "active"
        STOPPING = "stopping"
        STOPPED = "stopped"
        FAILED = "failed"
        EXPIRED = "expired"

    ENDED_STATES = (State.STOPPING, State.STOPPED, State.FAILED, State.EXPIRED)
    LIVE_STATES = (State.PENDING, State.ACTIVE)  # what the concurrent-sessions quota counts

    id = models.CharField(primary_key=True, max_length=64, default="", editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sessions")
    name = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    tags = models.JSONField(default=list)
    user_metadata = models.JSONField(null=True, blank=True)
    sdk_version = models.CharField(max_length=64, blank=True)
    platform = models.JSONField(default=dict)  # role_arn, package group, s3 path, kms key, vpc
    created_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"]),
            models.Index(fields=["state", "last_heartbeat_at"]),
        ]

    def save(self, *args, **kwargs) -> None:
        if not self.id:
            self.id = new_id("sess")
        super().save(*args, **kwargs)


class SessionFinish(models.Model):
    """A client's own account of how its session ended (tinker's ``sessions/<id>/finish``,
    SDK >= 0.26); the first one given stands, and the session's status answers with it."""

    class Reason(models.TextChoices):
        SUCCESS = "success"
        ERRORED = "errored"
        INTERRUPTED = "interrupted"

    session = models.OneToOneField(
        Session, primary_key=True, on_delete=models.CASCADE, related_name="client_finish"
    )
    reason = models.CharField(max_length=16, choices=Reason.choices)
    detail = models.TextField(blank=True)
    finished_at = models.DateTimeField(auto_now_add=True)


class TrainingModel(models.Model):
    """A LoRA adapter being trained on one worker (a "training run")."""

    class State(models.TextChoices):
        CREATING = "creating"
        READY = "ready"
        UNLOADING = "unloading"
        UNLOADED = "unloaded"
        FAILED = "failed"

    class Placement(models.TextChoices):
        PLACED = "placed"
        WAITING_FOR_WORKER = "waiting_for_worker"  # no live worker serves its base model
        WAITING_FOR_CAPACITY = "waiting_for_capacity"  # every worker that could take it is full
        WAITING_FOR_NETWORK = "waiting_for_network"  # none matches the session's network
        NEVER_PLACED = "never_placed"  # it ended while waiting

    LIVE_STATES = (State.CREATING, State.READY, State.UNLOADING)
    WAITING = (
        Placement.WAITING_FOR_WORKER,
        Placement.WAITING_FOR_CAPACITY,
        Placement.WAITING_FOR_NETWORK,
    )

    id = models.CharField(primary_key=True, max_length=64, default="", editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="training_models")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="models")
    model_seq_id = models.IntegerField()
    base_model = models.CharField(max_length=200)
    # rank, alpha, seed, train_attn, train_mlp, train_unembed; train_projector (written only when
    # true); optimizer ("dimuon"; absent: AdamW)
    lora = models.JSONField()
    # Data-parallel ranks it trains on (1: one worker); >1: placed on a replica group of that size
    replicas = models.PositiveSmallIntegerField(default=1)
    # The context it asked for (services/context.py); None: its base model's maximum
    context_length = models.PositiveIntegerField(null=True, blank=True)
    user_metadata = models.JSONField(null=True, blank=True)
    # None while it waits for a worker; its operations queue up until one takes it.
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.PROTECT, related_name="models"
    )
    placement = models.CharField(max_length=32, choices=Placement.choices, default=Placement.PLACED)
    status_reason = models.TextField(blank=True)  # why it waits, for people
    # When it last joined the placement queue (services/queue.py owns these three fields)
    queued_at = models.DateTimeField(null=True, blank=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    # When it stopped holding a slot for good (unloaded, or failed): from placed_at to here is
    # what the queue's start estimates learn from
    ended_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.CREATING)
    next_seq = models.IntegerField(default=0)
    # Where a new worker starts from if this one is lost: the state after operation ``seq``
    # (a state save without pending gradients, or the service's own snapshot), as
    # ``{"seq", "kind", "tinker_path"?, "storage_uri", "storage_path", "manifest", "sealing",
    # "at"}``; None: from the start (its create_model). Only ever moves forward.
    recovery = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_request_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "model_seq_id"], name="uniq_model_seq_per_session"
            ),
        ]
        indexes = [
            models.Index(fields=["placement", "created_at"], name="model_placement_idx"),
            models.Index(fields=["base_model", "-ended_at"], name="model_ended_idx"),
        ]

    def save(self, *args, **kwargs) -> None:
        if not self.id:
            self.id = new_id("model")
        super().save(*args, **kwargs)


class SamplingSession(models.Model):
    """A sampler: the base model, saved sampler weights (a path), or a live model's adapter."""

    id = models.CharField(primary_key=True, max_length=64, default="", editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sampling_sessions")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="sampling_sessions")
    sampling_session_seq_id = models.IntegerField(null=True)
    base_model = models.CharField(max_length=200)
    model_path = models.CharField(max_length=500, blank=True)
    storage_path = models.CharField(max_length=2048, blank=True)
    live_model = models.ForeignKey(
        TrainingModel, null=True, blank=True, on_delete=models.CASCADE, related_name="samplers"
    )
    # The context it asked for (services/context.py); None: its base model's maximum
    context_length = models.PositiveIntegerField(null=True, blank=True)
    # None while it waits for a live worker (its worker was lost and none serves its base model)
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.PROTECT, related_name="samplers"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "sampling_session_seq_id"],
                condition=Q(sampling_session_seq_id__isnull=False),
                name="uniq_sampler_seq_per_session",
            ),
        ]

    def save(self, *args, **kwargs) -> None:
        if not self.id:
            self.id = new_id("sampler")
        super().save(*args, **kwargs)


class Operation(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Kind(models.TextChoices):
        CREATE_MODEL = "create_model"
        FORWARD = "forward"
        FORWARD_BACKWARD = "forward_backward"
        OPTIM_STEP = "optim_step"
        SAVE_WEIGHTS = "save_weights"
        SAVE_WEIGHTS_FOR_SAMPLER = "save_weights_for_sampler"
        LOAD_WEIGHTS = "load_weights"
        UNLOAD_MODEL = "unload_model"
        SAMPLE = "sample"
        MISSING = "missing"  # a seq_id that never arrived; recorded so later ones can run

    FINISHED = (Status.DONE, Status.FAILED)

    id = models.CharField(primary_key=True, max_length=64, default="", editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="operations")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="operations")
    model = models.ForeignKey(
        TrainingModel, null=True, blank=True, on_delete=models.CASCADE, related_name="operations"
    )
    sampling_session = models.ForeignKey(
        SamplingSession, null=True, blank=True, on_delete=models.CASCADE, related_name="operations"
    )
    # None while its model waits for a worker
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.PROTECT, related_name="operations"
    )
    seq_id = models.IntegerField(null=True, blank=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    # the request body as validated; each image's data a reference into ``sealed_images``
    payload = models.JSONField()
    # the request's images, one LWENC1 envelope sealed with the tenant's KMS key (empty: none)
    sealed_images = models.BinaryField(default=b"", blank=True)
    plan = models.JSONField(default=dict)  # what the worker needs: adapter id, storage paths
    payload_digest = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_category = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # a client's key for a request it may send again (the OpenAI endpoints' Idempotency-Key):
    # the retry gets this operation back instead of a new one, and is not metered twice
    idempotency_key = models.CharField(max_length=300, null=True, blank=True)
    # the visible prefix of the API key (or the access key id) whose request made it; "" when
    # no key did (a dashboard form, the service itself, or before keys were recorded)
    api_key = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="uniq_op_idempotency_key",
            ),
            models.UniqueConstraint(
                fields=["model", "seq_id"],
                condition=Q(model__isnull=False, seq_id__isnull=False),
                name="uniq_op_seq_per_model",
            ),
            models.UniqueConstraint(
                fields=["sampling_session", "seq_id"],
                condition=Q(sampling_session__isnull=False, seq_id__isnull=False),
                name="uniq_op_seq_per_sampler",
            ),
        ]
        indexes = [
            models.Index(fields=["worker", "status"]),
            models.Index(fields=["model", "status", "seq_id"]),
        ]

    def save(self, *args, **kwargs) -> None:
        if not self.id:
            self.id = new_id("req")
        super().save(*args, **kwargs)


class Checkpoint(models.Model):
    """A saved adapter: training state (with optimizer) or sampler weights."""

    class Kind(models.TextChoices):
        TRAINING = "training"
        SAMPLER = "sampler"

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="checkpoints")
    model = models.ForeignKey(TrainingModel, on_delete=models.CASCADE, related_name="checkpoints")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=200)
    tinker_path = models.CharField(max_length=500, unique=True)
    # a local folder, or the storage URI of a checkpoint kept elsewhere (S3)
    storage_path = models.CharField(max_length=2048)
    merged_path = models.CharField(max_length=2048, blank=True)
    # file:///… or s3://bucket/…; empty for checkpoints saved before (read from storage_path)
    storage_uri = models.CharField(max_length=2048, blank=True)
    # {name: {"size", "sha256"}} of the stored (sealed) objects, checked on every fetch
    manifest = models.JSONField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)  # of the manifest (its canonical JSON)
    size_bytes = models.BigIntegerField(null=True)  # of the files as saved, before sealing
    kms_key_arn = models.CharField(max_length=200, blank=True)  # the key that sealed the files
    lora = models.JSONField()
    base_model = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # a copy (copy_weights): the path it was copied from, and the client's key for the request
    # that made it (a retry gets the same copy)
    copied_from = models.CharField(max_length=500, blank=True)
    copy_key = models.CharField(max_length=200, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "copy_key"],
                condition=Q(copy_key__isnull=False),
                name="uniq_checkpoint_copy_key",
            ),
        ]


class Recovery(models.Model):
    """A model taken off a worker that was lost or stopped, and how it was brought back: its
    recovery point loaded on another worker (or the same one, started again) and the training
    operations completed since replayed."""

    class Cause(models.TextChoices):
        WORKER_LOST = "worker_lost"  # silent past its lease
        WORKER_RESTARTED = "worker_restarted"  # started again under its name before that
        WORKER_STOPPED = "worker_stopped"  # stopped on its own and handed its models over
        STATE_UNRECORDED = "state_unrecorded"  # its worker could not record a result
        GROUP_BROKEN = "group_broken"  # a member of its replica group was lost or left

    class Outcome(models.TextChoices):
        RESTORING = "restoring"
        RESTORED = "restored"
        FAILED = "failed"
        ENDED = "ended"  # the model was unloaded before anything needed it back

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="recoveries")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="recoveries")
    model = models.ForeignKey(TrainingModel, on_delete=models.CASCADE, related_name="recoveries")
    cause = models.CharField(max_length=32, choices=Cause.choices)
    from_worker = models.CharField(max_length=200)
    to_worker = models.CharField(max_length=200, blank=True)
    declared_at = models.DateTimeField()
    declared_by = models.CharField(max_length=200)  # which process noticed
    requeued = models.IntegerField(default=0)  # its operations put back to pending
    recovery_seq = models.IntegerField(null=True, blank=True)  # None: from create_model
    recovery_kind = models.CharField(max_length=16, blank=True)  # snapshot | save | start
    replayed = models.IntegerField(null=True, blank=True)
    restored_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.RESTORING)
    error = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["model", "-declared_at"], name="recovery_model_idx")]

    @property
    def seconds(self) -> float | None:
        """From the moment the loss was noticed to the model being whole again."""
        if self.restored_at is None:
            return None
        return (self.restored_at - self.declared_at).total_seconds()


class RecordedSample(models.Model):
    """The sequences a sample request made with ``record_stability_info`` returned, kept so that
    training requests of the same session can cite them (provenance spans): its prompt once, and
    each sequence's sampled tokens and their sampling logprobs, as little-endian arrays. The
    prompt's images are kept sealed with the tenant's key, never in clear.

    Sequence ``i`` of the request is ``<id>:<i>``. Written in the transaction that completes the
    sample; sequence ``i`` is citable until ``expiries[i]``, which each training request that
    cites it moves to a day later; the row goes with its session, or (the janitor) once
    ``expires_at``, the latest of them, has passed.
    """

    id = models.CharField(primary_key=True, max_length=64)  # the sample operation's id
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="recordings")
    prompt = models.BinaryField()  # int32 token ids; -1 at each position an image takes
    # the prompt's images, sealed with the tenant's KMS key (LWENC1); empty when it has none
    images = models.BinaryField(default=b"")
    tokens = models.BinaryField()  # int32: every sequence's sampled tokens, one after another
    logprobs = models.BinaryField()  # float32, one per sampled token
    lengths = models.JSONField()  # sampled tokens per sequence, in order
    size_bytes = models.PositiveBigIntegerField()  # what it holds, counted by the quota
    created_at = models.DateTimeField(auto_now_add=True)
    expiries = models.JSONField()  # per sequence: until when (Unix seconds) it may be cited
    expires_at = models.DateTimeField()  # the latest of them

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "expires_at"], name="recording_tenant_exp_idx"),
            models.Index(fields=["expires_at"], name="recording_expiry_idx"),
        ]
