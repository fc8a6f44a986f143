"""Writes of the registry: groups, versions registered by saves, approvals, deletion and expiry.

Services trust their caller to have authorized ``actor``; they log every change with it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.errors import Conflict, DomainError
from controlplane.iam.resources import model_package_arn, session_arn
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, Operation
from controlplane.training_sessions.save_groups import (
    NAME_MAX,
    NAME_RULE,
    save_group_name,
    valid_group_name,
)

from .models import ModelPackage, ModelPackageGroup
from .selectors import group_get, package_get, package_loaded_from, training_metrics

log = logging.getLogger("loopwright.registry")

MAX_DESCRIPTION = 1024
MAX_TAGS = 50
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256
APPROVAL_STATUSES = tuple(ModelPackage.Approval.values)
KINDS = tuple(ModelPackage.Kind.values)


def package_arn(package: ModelPackage) -> str:
    return model_package_arn(package.tenant, package.group.name, package.version)


# -- validation --------------------------------------------------------------------------------
def group_name_checked(name: object, field: str = "name") -> str:
    if not isinstance(name, str) or not name:
        raise DomainError(f"{field} is required: {NAME_RULE}", field=field)
    if len(name) > NAME_MAX:
        raise DomainError(f"{field}: at most {NAME_MAX} characters", field=field)
    if not valid_group_name(name):
        raise DomainError(f"{field}: {NAME_RULE}", field=field)
    return name


def description_checked(value: object, field: str = "description") -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DomainError(f"{field}: must be a string", field=field)
    if len(value) > MAX_DESCRIPTION:
        raise DomainError(f"{field}: at most {MAX_DESCRIPTION} characters", field=field)
    return value


def tags_checked(value: object) -> list[dict[str, str]]:
    """``[{"key", "value"}]``: at most 50, keys 1–128 characters and distinct, values ≤ 256."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DomainError('tags: a list of {"key": ..., "value": ...}', field="tags")
    if len(value) > MAX_TAGS:
        raise DomainError(f"tags: at most {MAX_TAGS}", field="tags")
    tags, seen = [], set()
    for i, tag in enumerate(value):
        where = f"tags[{i}]"
        if not isinstance(tag, dict):
            raise DomainError(f'{where}: must be {{"key": ..., "value": ...}}', field=where)
        for name in tag:
            if name not in ("key", "value"):
                raise DomainError(f"{where}.{name}: unknown field", field=f"{where}.{name}")
        key, text = tag.get("key"), tag.get("value", "")
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_TAG_KEY:
            raise DomainError(
                f"{where}.key: a string of 1–{MAX_TAG_KEY} characters", field=f"{where}.key"
            )
        if not isinstance(text, str) or len(text) > MAX_TAG_VALUE:
            raise DomainError(
                f"{where}.value: a string of at most {MAX_TAG_VALUE} characters",
                field=f"{where}.value",
            )
        if key in seen:
            raise DomainError(f"{where}.key: {key!r} appears twice", field=f"{where}.key")
        seen.add(key)
        tags.append({"key": key, "value": text})
    return tags


# -- groups ------------------------------------------------------------------------------------
@transaction.atomic
def group_create(
    *, tenant: Tenant, actor: str, name: str, description: str = "", tags: object = None
) -> ModelPackageGroup:
    name = group_name_checked(name)
    fields = {"description": description_checked(description), "tags": tags_checked(tags)}
    try:
        with transaction.atomic():
            group = ModelPackageGroup.objects.create(
                tenant=tenant, name=name, created_by=actor, **fields
            )
    except IntegrityError:
        raise Conflict(f"model package group {name} exists", field="name") from None
    log.info("registry: group %s created by %s", name, actor)
    return group


@transaction.atomic
def group_delete(*, tenant: Tenant, actor: str, name: str, force: bool = False) -> None:
    """Delete a group; one that has versions only with ``force`` (its versions go with it).
    The checkpoints themselves stay (the training run still lists them)."""
    group = ModelPackageGroup.objects.select_for_update().get(
        pk=group_get(tenant=tenant, name=name).pk
    )
    count = group.packages.count()
    if count and not force:
        raise Conflict(
            f"model package group {name} has {count} versions: delete them first or pass "
            "force=true",
            field="force",
        )
    group.delete()
    log.info("registry: group %s deleted by %s (%d versions)", name, actor, count)


def _group_locked(tenant: Tenant, name: str, actor: str) -> ModelPackageGroup:
    """The group, locked for numbering its next version; made if it does not exist yet."""
    groups = ModelPackageGroup.objects.select_for_update()
    group = groups.filter(tenant=tenant, name=name).first()
    if group is None:
        try:
            with transaction.atomic():
                ModelPackageGroup.objects.create(tenant=tenant, name=name, created_by=actor)
            log.info("registry: group %s created on first use by %s", name, actor)
        except IntegrityError:
            pass  # made at the same moment by another save
        group = groups.get(tenant=tenant, name=name)
    return group


# -- versions ----------------------------------------------------------------------------------
@transaction.atomic
def package_create(
    *,
    tenant: Tenant,
    actor: str,
    group_name: str,
    checkpoint: Checkpoint,
    kind: str,
    session_id: str = "",
    model_id: str = "",
    step: int | None = None,
    metrics: dict | None = None,
    parent: ModelPackage | None = None,
) -> ModelPackage:
    """Register ``checkpoint`` as the group's next version (numbered under the group's lock)."""
    group = _group_locked(tenant, group_name, actor)
    group.latest_version += 1
    group.save(update_fields=["latest_version"])
    # a checkpoint saved again under the same path no longer holds the older versions' weights
    ModelPackage.objects.filter(checkpoint=checkpoint).update(checkpoint=None)
    package = ModelPackage.objects.create(
        tenant=tenant,
        group=group,
        version=group.latest_version,
        kind=kind,
        base_model=checkpoint.base_model,
        lora=checkpoint.lora or {},
        session_id=session_id,
        model_id=model_id,
        step=step,
        metrics=metrics or {},
        tinker_path=checkpoint.tinker_path,
        checkpoint=checkpoint,
        storage_uri=getattr(checkpoint, "storage_uri", None) or "",
        sha256=getattr(checkpoint, "sha256", None) or "",
        size_bytes=getattr(checkpoint, "size_bytes", None),
        kms_key_arn=getattr(checkpoint, "kms_key_arn", None) or "",
        parent=parent,
        created_by=actor,
        expires_at=checkpoint.expires_at,
    )
    return package


def is_sampler_only(operation: Operation) -> bool:
    """A save made only to sample from: the ephemeral sampler weights of
    ``save_weights_and_get_sampling_client`` (``save_weights_for_sampler`` with a
    ``sampling_session_seq_id`` and no path), which open their sampler themselves and expire
    with their time-to-live."""
    return bool(operation.plan.get("sampler_id"))


def package_register(*, operation: Operation) -> ModelPackage | None:
    """A finished save's checkpoint becomes the next version of the session's group (or of the
    run's own group, ``run-<model id>``), with its run, step, metrics and lineage. A save made
    only to sample from is no version (None): it stays reachable by its ``tinker://`` path
    until its time-to-live ends, and the registry holds what people save to keep."""
    if is_sampler_only(operation):
        return None
    spec = operation.plan["checkpoint"]
    checkpoint = Checkpoint.objects.select_related("tenant", "model__session").get(
        tinker_path=spec["tinker_path"]
    )
    model, tenant = checkpoint.model, checkpoint.tenant
    session = model.session
    if spec.get("merge"):
        kind = ModelPackage.Kind.MERGED
    elif checkpoint.kind == Checkpoint.Kind.TRAINING:
        kind = ModelPackage.Kind.TRAINING_STATE
    else:
        kind = ModelPackage.Kind.SAMPLER_WEIGHTS
    return package_create(
        tenant=tenant,
        actor=session.platform.get("role_arn") or session_arn(tenant, session.id),
        group_name=save_group_name(session.platform, model.id),
        checkpoint=checkpoint,
        kind=kind,
        session_id=session.id,
        model_id=model.id,
        step=operation.seq_id,
        metrics=training_metrics(model_id=model.id, before_seq=operation.seq_id),
        parent=package_loaded_from(tenant=tenant, model_id=model.id, before_seq=operation.seq_id),
    )


@transaction.atomic
def package_update_approval(
    *,
    tenant: Tenant,
    actor: str,
    group_name: str,
    version: int,
    status: str,
    description: str | None = None,
) -> ModelPackage:
    """Set the approval (any of the three statuses, from any), recording who and when."""
    if status not in APPROVAL_STATUSES:
        raise DomainError(
            f"approval_status: one of {', '.join(APPROVAL_STATUSES)}", field="approval_status"
        )
    package = package_get(tenant=tenant, group_name=group_name, version=version)
    package = ModelPackage.objects.select_for_update().select_related("group").get(pk=package.pk)
    package.approval_status = status
    if description is not None:
        package.approval_description = description_checked(description, "approval_description")
    package.approval_updated_by = actor
    package.approval_updated_at = timezone.now()
    package.save(
        update_fields=[
            "approval_status",
            "approval_description",
            "approval_updated_by",
            "approval_updated_at",
        ]
    )
    log.info("registry: %s set to %s by %s", package_arn(package), status, actor)
    return package


@transaction.atomic
def package_delete(*, tenant: Tenant, actor: str, group_name: str, version: int) -> None:
    """Delete a version's record; its checkpoint stays. Its number is not used again."""
    package = package_get(tenant=tenant, group_name=group_name, version=version)
    arn = package_arn(package)
    package.delete()
    log.info("registry: %s deleted by %s", arn, actor)


def packages_expire(*, now: datetime | None = None) -> list[str]:
    """Delete versions past their time-to-live (ephemeral sampler weights); returns their ARNs.
    An approved version stays, unless its group's retention rule does not keep approved ones."""
    now = now or timezone.now()
    gone = []
    for package in ModelPackage.objects.filter(expires_at__lt=now).select_related(
        "tenant", "group", "group__retention"
    ):
        rule = getattr(package.group, "retention", None)
        approved = package.approval_status == ModelPackage.Approval.APPROVED
        if approved and (rule is None or rule.keep_approved):
            continue
        gone.append(package_arn(package))
        package.delete()
    return gone
