"""Reads of the registry, always within one tenant: a missing group or version and another
tenant's look the same (NotFound naming the field)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from controlplane.errors import NotFound
from controlplane.iam.arns import Arn, ArnError
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation
from controlplane.training_sessions.save_groups import valid_group_name

from .models import ModelPackage, ModelPackageGroup

PACKAGE_ARN_FORMAT = "arn:loopwright:registry::<account>:model-package/<group>/<version>"


# -- groups ------------------------------------------------------------------------------------
def group_get(*, tenant: Tenant, name: str, field: str = "name") -> ModelPackageGroup:
    group = None
    if valid_group_name(name):
        group = ModelPackageGroup.objects.filter(tenant=tenant, name=name).first()
    if group is None:
        raise NotFound(f"model package group {str(name)[:100]!r} not found", field=field)
    return group


def group_list(*, tenant: Tenant, limit: int, offset: int) -> tuple[list[ModelPackageGroup], int]:
    groups = ModelPackageGroup.objects.filter(tenant=tenant).select_related("tenant")
    page = list(groups.order_by("-created_at", "-id")[offset : offset + limit])
    return page, groups.count()


def group_version_count(group: ModelPackageGroup) -> int:
    return group.packages.count()


# -- versions ----------------------------------------------------------------------------------
def _packages(tenant: Tenant) -> QuerySet[ModelPackage]:
    return ModelPackage.objects.filter(tenant=tenant).select_related(
        "tenant", "group", "parent__group"
    )


def package_get(
    *, tenant: Tenant, group_name: str, version: int, field: str = "version"
) -> ModelPackage:
    found = None
    if valid_group_name(group_name):
        found = _packages(tenant).filter(group__name=group_name, version=version).first()
    if found is None:
        raise NotFound(f"model package {str(group_name)[:100]}/{version} not found", field=field)
    return found


def package_list(
    *,
    tenant: Tenant,
    group: ModelPackageGroup,
    approval_status: str | None,
    kind: str | None,
    limit: int,
    offset: int,
) -> tuple[list[ModelPackage], int]:
    """The group's versions, newest first, with how many match the filters."""
    found = _packages(tenant).filter(group=group)
    if approval_status:
        found = found.filter(approval_status=approval_status)
    if kind:
        found = found.filter(kind=kind)
    return list(found.order_by("-version")[offset : offset + limit]), found.count()


def package_by_arn(*, tenant: Tenant, arn: str, field: str = "model_package_arn") -> ModelPackage:
    """The tenant's version named by its ARN; a malformed ARN or another account's is not found."""
    try:
        parsed = Arn.parse(arn)
    except ArnError:
        parsed = None
    group, _, version = parsed.resource_id.rpartition("/") if parsed else ("", "", "")
    if (
        parsed is None
        or parsed.service != "registry"
        or parsed.resource_type != "model-package"
        or parsed.account != tenant.account_id
        or not version.isdigit()
        or len(version) > 9
    ):
        raise NotFound(f"{field}: no model package {str(arn)[:300]!r}", field=field)
    return package_get(tenant=tenant, group_name=group, version=int(version), field=field)


def package_by_path(*, tenant: Tenant, path: str, field: str = "path") -> ModelPackage:
    """The version named by its ARN, or the newest version registered for a ``tinker://`` path."""
    if path.startswith("arn:"):
        return package_by_arn(tenant=tenant, arn=path, field=field)
    found = _packages(tenant).filter(tinker_path=path).order_by("-created_at", "-id").first()
    if found is None:
        raise NotFound(f"{field}: no model package for {path[:500]!r}", field=field)
    return found


def package_checkpoint_path(*, tenant: Tenant, arn: str, field: str = "path") -> str:
    """The ``tinker://`` path of the checkpoint a version holds, to load or sample from."""
    package = package_by_arn(tenant=tenant, arn=arn, field=field)
    if package.checkpoint_id is None:
        raise NotFound(
            f"{field}: model package {arn} has no weights any more (its checkpoint "
            f"{package.tinker_path} expired, was deleted or was overwritten by a later save)",
            field=field,
        )
    return package.tinker_path


def merged_manifest(package: ModelPackage) -> dict | None:
    """The manifest of a merged version's merged model, as its save recorded it (None if none)."""
    result = (
        Operation.objects.filter(
            model_id=package.model_id,
            seq_id=package.step,
            kind=Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER,
            status=Operation.Status.DONE,
        )
        .values_list("result", flat=True)
        .first()
    )
    manifest = result.get("_merged_manifest") if isinstance(result, dict) else None
    return manifest if isinstance(manifest, dict) else None


# -- what a save records -----------------------------------------------------------------------
def package_loaded_from(
    *, tenant: Tenant, model_id: str, before_seq: int | None
) -> ModelPackage | None:
    """The version the model's latest ``load_weights`` (before ``before_seq``) loaded, if any."""
    loads = Operation.objects.filter(
        model_id=model_id, kind=Operation.Kind.LOAD_WEIGHTS, status=Operation.Status.DONE
    )
    if before_seq is not None:
        loads = loads.filter(seq_id__lt=before_seq)
    load = loads.order_by("-seq_id").first()
    path = (load.payload or {}).get("path") if load is not None else None
    if not isinstance(path, str) or not path:
        return None
    if path.startswith("arn:"):
        try:
            return package_by_arn(tenant=tenant, arn=path)
        except NotFound:
            return None
    loaded_at: datetime | None = load.finished_at
    found = ModelPackage.objects.filter(tenant=tenant, tinker_path=path)
    if loaded_at is not None:
        found = found.filter(created_at__lte=loaded_at)
    return found.order_by("-created_at", "-id").first()


def training_metrics(*, model_id: str, before_seq: int | None) -> dict:
    """The numeric metrics of the model's latest ``forward_backward`` before ``before_seq``."""
    passes = Operation.objects.filter(
        model_id=model_id, kind=Operation.Kind.FORWARD_BACKWARD, status=Operation.Status.DONE
    )
    if before_seq is not None:
        passes = passes.filter(seq_id__lt=before_seq)
    result = passes.order_by("-seq_id").values_list("result", flat=True).first() or {}
    metrics = result.get("metrics") if isinstance(result, dict) else None
    if not isinstance(metrics, dict):
        return {}
    return {
        k: v
        for k, v in metrics.items()
        if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
    }
