"""Reads, always scoped to a tenant: a missing object and another tenant's raise the same NotFound."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from django.db.models import Max

from controlplane.fleet.models import ReplicaGroup, Worker
from controlplane.tenants.models import Tenant

from .errors import NotFound
from .models import Checkpoint, Operation, Recovery, SamplingSession, Session, TrainingModel


class VersionPath(Protocol):
    def __call__(self, *, tenant: Tenant, arn: str, field: str) -> str: ...


_version_path: VersionPath | None = None


def version_paths_from(resolve: VersionPath) -> None:
    """Where ``checkpoint_by_path`` learns the ``tinker://`` path of the checkpoint a model
    package version ARN holds: the registry keeps the versions (above this app) and hands its
    resolver over when it is ready (``RegistryConfig.ready``)."""
    global _version_path
    _version_path = resolve


def session_get(*, tenant: Tenant, session_id: str) -> Session:
    try:
        return Session.objects.get(tenant=tenant, id=session_id)
    except Session.DoesNotExist:
        raise NotFound(f"session {session_id!r} not found", field="session_id") from None


def session_list(*, tenant: Tenant, limit: int = 100, offset: int = 0) -> list[Session]:
    return list(
        Session.objects.filter(tenant=tenant).order_by("-created_at")[offset : offset + limit]
    )


def session_recoveries(session: Session, limit: int = 100) -> list[Recovery]:
    """The session's failovers, newest first."""
    return list(session.recoveries.order_by("-declared_at", "-id")[:limit])


def failure_reasons(*, tenant: Tenant, sessions: Iterable[Session]) -> dict[str, str]:
    """Why each failed session failed: the error of its model that could not be created."""
    failed = [s.id for s in sessions if s.state == Session.State.FAILED]
    if not failed:
        return {}
    reasons: dict[str, str] = {}
    for session_id, error in (
        Operation.objects.filter(
            tenant=tenant,
            session_id__in=failed,
            kind=Operation.Kind.CREATE_MODEL,
            status=Operation.Status.FAILED,
        )
        .order_by("created_at")
        .values_list("session_id", "error")
    ):
        reasons.setdefault(session_id, error)
    return reasons


def model_get(*, tenant: Tenant, model_id: str) -> TrainingModel:
    try:
        return TrainingModel.objects.select_related("session", "worker").get(
            tenant=tenant, id=model_id
        )
    except TrainingModel.DoesNotExist:
        raise NotFound(f"model {model_id!r} not found", field="model_id") from None


def model_replicas(model_id: str) -> int:
    """The data-parallel replicas a model trains on (1: one worker, or no such model), for the
    worker that runs it; it never changes."""
    found = TrainingModel.objects.filter(pk=model_id).values_list("replicas", flat=True).first()
    return found or 1


def model_next_free_seq(model: TrainingModel) -> int:
    """The seq_id after the highest one the model has received (where an attaching client
    continues); at least the one it runs next."""
    highest = model.operations.aggregate(highest=Max("seq_id"))["highest"]
    return max(model.next_seq, (highest if highest is not None else -1) + 1)


def model_replica_group(model: TrainingModel) -> tuple[ReplicaGroup, list[Worker]] | None:
    """The group of workers a model trains on (data parallel, ``replicas`` > 1, or a sharded
    base), through its worker (the group's coordinator), with the group's members by rank; None
    for a model on one worker, or one that waits for its workers."""
    if model.worker_id is None or model.worker.group_id is None:
        return None
    group = ReplicaGroup.objects.get(pk=model.worker.group_id)
    if model.replicas <= 1 and not group.sharded:
        return None  # a coordinator's single-worker model
    return group, list(group.members.order_by("rank", "name"))


def session_next_free_sampler_seq(session: Session) -> int:
    """The sampling_session_seq_id after the highest one the session has used: by a sampler, or
    by an ephemeral sampler save still to run (where an attaching client's samplers continue)."""
    used = [
        session.sampling_sessions.aggregate(highest=Max("sampling_session_seq_id"))["highest"],
        *(
            int(seq)
            for seq in session.operations.filter(
                kind=Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER,
                status__in=(Operation.Status.PENDING, Operation.Status.RUNNING),
                payload__sampling_session_seq_id__isnull=False,
            ).values_list("payload__sampling_session_seq_id", flat=True)
            if isinstance(seq, int)
        ),
    ]
    return max((seq for seq in used if seq is not None), default=-1) + 1


def model_list(*, tenant: Tenant, limit: int = 100, offset: int = 0) -> list[TrainingModel]:
    qs = TrainingModel.objects.filter(tenant=tenant).order_by("-created_at")
    return list(qs[offset : offset + limit])


def sampler_get(*, tenant: Tenant, sampling_session_id: str) -> SamplingSession:
    try:
        return SamplingSession.objects.select_related("session", "worker").get(
            tenant=tenant, id=sampling_session_id
        )
    except SamplingSession.DoesNotExist:
        raise NotFound(
            f"sampling session {sampling_session_id!r} not found", field="sampling_session_id"
        ) from None


def operation_get(*, tenant: Tenant, request_id: str) -> Operation:
    try:
        return Operation.objects.get(tenant=tenant, id=request_id)
    except Operation.DoesNotExist:
        raise NotFound(f"request {request_id!r} not found", field="request_id") from None


def checkpoint_by_path(*, tenant: Tenant, tinker_path: str, field: str = "path") -> Checkpoint:
    """The checkpoint at a ``tinker://`` path, or the one a model package version ARN holds."""
    if tinker_path.startswith("arn:"):
        assert _version_path is not None, "the registry app resolves version ARNs"  # noqa: S101 — an invariant of this code, not a check of input
        tinker_path = _version_path(tenant=tenant, arn=tinker_path, field=field)
    try:
        return Checkpoint.objects.select_related("model").get(
            tenant=tenant, tinker_path=tinker_path
        )
    except Checkpoint.DoesNotExist:
        raise NotFound(f"checkpoint {tinker_path!r} not found", field=field) from None


def checkpoint_list(*, tenant: Tenant, model: TrainingModel) -> list[Checkpoint]:
    return list(Checkpoint.objects.filter(tenant=tenant, model=model).order_by("created_at"))
