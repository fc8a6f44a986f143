"""Copies of a checkpoint inside an account (tinker's ``copy_weights``).

The source's files are fetched, checked against its manifest and opened, sealed again for the
copy's own path (every checkpoint's files are sealed under its own name) with the destination
session's KMS key, and stored beside the destination's checkpoints: deleting or expiring either
never touches the other. The copy belongs to a new training run that cannot be trained on (it
holds the weights; load them into a model to go on): in the slot of the session named, or, for
a copy into the account's project, in the account's ``checkpoint copies`` session (a stopped
session no client uses, so no client's next slot is ever taken). It is the next version of the
destination session's model package group (a project copy: of its source's group), with the
source's version as its parent. A retry with the same idempotency key gets the same copy back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from controlplane.errors import Conflict, DomainError, NotFound
from controlplane.iam.resources import checkpoint_arn
from controlplane.kms import providers
from controlplane.kms import services as kms
from controlplane.kms.envelope import seal_file
from controlplane.kms.selectors import key_ref_by_arn
from controlplane.storage import location, manifest_digest
from controlplane.storage.base import folder_files
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, Session, TrainingModel, new_id
from controlplane.training_sessions.save_groups import save_group_name
from controlplane.training_sessions.selectors import checkpoint_by_path, session_get
from controlplane.training_sessions.services.checkpoint_plans import checkpoint_location
from controlplane.training_sessions.services.storage import storage_at

from . import downloads
from .models import ModelPackage
from .services import package_create

log = logging.getLogger("loopwright.registry")

PROJECT = "default"  # an account is one project
COPIES_SESSION, COPIES_TAG = "checkpoint copies", "loopwright:copies"
MIN_TTL, MAX_TTL = 3600, 10 * 365 * 24 * 3600


@dataclass(frozen=True)
class CopyRequest:
    """Where a copy goes: a session and the model slot it takes there, or the account's
    project (then beside the source, in the source's session)."""

    source_path: str
    session_id: str | None = None
    model_seq_id: int | None = None
    destination_project_id: str | None = None
    ttl_seconds: int | None = None
    weights_access_token: str | None = None
    idempotency_key: str | None = None


def checkpoint_copy(
    *, tenant: Tenant, request: CopyRequest, authorize: Callable[[str, str], None]
) -> Checkpoint:
    """Copy the tenant's checkpoint ``request.source_path``; ``authorize(action, resource)``
    refuses (403) what the caller may not do."""
    _check(request)
    if request.idempotency_key:
        earlier = _earlier(tenant, request)
        if earlier is not None:
            return earlier
    source = checkpoint_by_path(tenant=tenant, tinker_path=request.source_path, field="source_path")
    authorize("sessions:CopyCheckpoint", checkpoint_arn(tenant, source.model_id, source.name))
    if source.kms_key_arn:
        authorize("kms:Decrypt", source.kms_key_arn)
    session = _destination(tenant, request)
    package = ModelPackage.objects.filter(checkpoint=source).select_related("group").first()
    if package is None:
        raise Conflict(
            f"{source.tinker_path} is not a model package version: it has nothing to copy from",
            field="source_path",
        )
    model = TrainingModel(
        id=new_id("model"),
        tenant=tenant,
        session=session,
        model_seq_id=_slot(session, request),
        base_model=source.base_model,
        lora=source.lora,
        state=TrainingModel.State.UNLOADED,
        placement=TrainingModel.Placement.NEVER_PLACED,
        status_reason=f"a copy of {source.tinker_path}: it holds the weights, it is not trained",
    )
    tinker_path, uri = checkpoint_location(model, source.kind, source.name)
    sealing = kms.save_sealing(
        tenant=tenant, key_arn=session.platform.get("kms_key_arn"), resource=tinker_path
    )
    authorize("kms:GenerateDataKey", sealing["key_arn"])
    manifest, size = _copy_files(package, source, uri, sealing)
    try:
        copy = _record(model, source, package, tinker_path, uri, manifest, sealing, request)
    except BaseException:
        storage_at(uri).delete()  # nothing recorded: nothing stays
        raise
    log.info("registry: %s copied to %s (%d bytes)", source.tinker_path, tinker_path, size)
    return copy


def _check(request: CopyRequest) -> None:
    if request.weights_access_token:
        raise DomainError(
            "weights_access_token: copies across accounts are not offered; copy within yours",
            field="weights_access_token",
        )
    to_session = request.session_id is not None or request.model_seq_id is not None
    if to_session == (request.destination_project_id is not None):
        raise DomainError(
            "give destination_project_id, or session_id with model_seq_id",
            field="destination_project_id",
        )
    if to_session and (request.session_id is None or request.model_seq_id is None):
        missing = "model_seq_id" if request.model_seq_id is None else "session_id"
        raise DomainError(f"{missing}: needed with the other", field=missing)
    ttl = request.ttl_seconds
    if ttl is not None and not MIN_TTL <= ttl <= MAX_TTL:
        raise DomainError(
            f"ttl_seconds: {ttl} is outside [{MIN_TTL}, {MAX_TTL}] (1 hour to 10 years)",
            field="ttl_seconds",
        )


def _earlier(tenant: Tenant, request: CopyRequest) -> Checkpoint | None:
    """The copy an earlier request with this idempotency key made (a 409 if it copied
    something else)."""
    earlier = Checkpoint.objects.filter(tenant=tenant, copy_key=request.idempotency_key).first()
    if earlier is not None and earlier.copied_from != request.source_path:
        raise Conflict(
            f"Idempotency-Key {request.idempotency_key!r} was used for a copy of "
            f"{earlier.copied_from}",
            field="source_path",
        )
    return earlier


def _destination(tenant: Tenant, request: CopyRequest) -> Session:
    if request.session_id is not None:
        return session_get(tenant=tenant, session_id=request.session_id)
    if request.destination_project_id != PROJECT:
        raise NotFound(
            f"project {str(request.destination_project_id)[:100]!r} not found (an account is "
            f"one project, {PROJECT!r})",
            field="destination_project_id",
        )
    return copies_session(tenant)


def copies_session(tenant: Tenant) -> Session:
    """The account's session that holds copies made into its project: stopped from the start
    (it counts against no quota and takes no operations), local storage, the default key."""
    found = Session.objects.filter(
        tenant=tenant, name=COPIES_SESSION, tags=[COPIES_TAG], state=Session.State.STOPPED
    ).first()
    if found is not None:
        return found
    return Session.objects.create(
        tenant=tenant,
        name=COPIES_SESSION,
        tags=[COPIES_TAG],
        state=Session.State.STOPPED,
        ended_at=timezone.now(),
        platform={},
    )


def _slot(session: Session, request: CopyRequest) -> int:
    if request.model_seq_id is not None:
        if request.model_seq_id < 0:
            raise DomainError("model_seq_id: must be ≥ 0", field="model_seq_id")
        if session.models.filter(model_seq_id=request.model_seq_id).exists():
            raise Conflict(
                f"model_seq_id {request.model_seq_id} of session {session.id} is taken",
                field="model_seq_id",
            )
        return request.model_seq_id
    top = session.models.aggregate(m=Max("model_seq_id"))["m"]
    return 0 if top is None else top + 1


def _copy_files(
    package: ModelPackage, source: Checkpoint, uri: str, sealing: dict
) -> tuple[dict, int]:
    """Open the source's files, seal them for the copy, store them at ``uri``; the manifest
    and the plaintext size."""
    plan = downloads.download_plan(
        package=package,
        format="adapter",
        include_optimizer=source.kind == Checkpoint.Kind.TRAINING,
        field="source_path",
    )
    key = key_ref_by_arn(tenant_id=source.tenant_id, arn=sealing["key_arn"])
    with downloads.opened(plan) as plain:
        sealed, size = plain.with_name("sealed"), 0
        with downloads.storage_failures(f"copying {source.tinker_path}"):
            for name, path in folder_files(plain):
                out = sealed / name
                out.parent.mkdir(parents=True, exist_ok=True)
                context = {**sealing["context"], "file": name}
                size += seal_file(
                    path, out, key=key, provider=providers.provider(key), context=context
                ).plaintext_size
            return storage_at(uri).put(sealed), size


@transaction.atomic
def _record(
    model: TrainingModel,
    source: Checkpoint,
    package: ModelPackage,
    tinker_path: str,
    uri: str,
    manifest: dict,
    sealing: dict,
    request: CopyRequest,
) -> Checkpoint:
    model.save(force_insert=True)
    expires = None
    if request.ttl_seconds:
        expires = timezone.now() + timedelta(seconds=request.ttl_seconds)
    try:
        with transaction.atomic():
            copy = Checkpoint.objects.create(
                tenant=model.tenant,
                model=model,
                kind=source.kind,
                name=source.name,
                tinker_path=tinker_path,
                storage_path=location(uri),
                storage_uri=uri,
                manifest=manifest,
                sha256=manifest_digest(manifest),
                size_bytes=source.size_bytes,
                kms_key_arn=sealing["key_arn"],
                lora=source.lora,
                base_model=source.base_model,
                expires_at=expires,
                copy_key=request.idempotency_key or None,
                copied_from=source.tinker_path,
            )
    except IntegrityError:  # the same key, committed meanwhile by a retry running alongside
        raise Conflict("this copy is being made by another request", field="source_path") from None
    session = model.session
    to_project = request.session_id is None
    package_create(
        tenant=model.tenant,
        actor=session.platform.get("role_arn") or f"session:{session.id}",
        group_name=package.group.name
        if to_project
        else save_group_name(session.platform, model.id),
        checkpoint=copy,
        kind=package.kind if package.kind != ModelPackage.Kind.MERGED else _plain_kind(source),
        session_id=session.id,
        model_id=model.id,
        step=package.step,
        metrics=package.metrics,
        parent=package,
    )
    return copy


def _plain_kind(source: Checkpoint) -> str:
    if source.kind == Checkpoint.Kind.TRAINING:
        return ModelPackage.Kind.TRAINING_STATE
    return ModelPackage.Kind.SAMPLER_WEIGHTS


def idempotency_key(header: str | None) -> str | None:
    """The client's key for a copy it may send again (``X-Idempotency-Key``), bounded."""
    if header is None:
        return None
    header = header.strip()
    if not 1 <= len(header) <= 200:
        raise DomainError("X-Idempotency-Key: 1 to 200 characters", field="X-Idempotency-Key")
    return header
