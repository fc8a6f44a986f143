"""The model package registry as SageMaker's API reads and writes it: CreateModelPackageGroup,
DescribeModelPackageGroup, ListModelPackages, DescribeModelPackage (its
``InferenceSpecification.Containers[0]`` names the base model and whether it is a resumable
checkpoint), UpdateModelPackage (approval) and DeleteModelPackage. A group or version is named
by its Loopwright ARN, or by ``<group>`` / ``<group>/<version>``; another account's and a
missing one are refused alike, as SageMaker refuses them: a ValidationException saying it does
not exist."""

from __future__ import annotations

from controlplane.edge.callers import allow
from controlplane.errors import Conflict, NotFound
from controlplane.iam.arns import Arn, ArnError
from controlplane.iam.resources import model_package_arn, model_package_group_arn
from controlplane.registry import selectors, services
from controlplane.registry.models import ModelPackage, ModelPackageGroup
from controlplane.sagemaker_sessions import hub
from controlplane.sagemaker_sessions.errors import NameInUse
from controlplane.sagemaker_sessions.paging import offset_of, token_of
from controlplane.training_sessions.save_groups import valid_group_name

from .calls import Call, created_between, validation

DEFAULT_PAGE = 10
MAX_VERSION = 2**31 - 1
TINKER_PATH_KEY = "loopwright:TinkerPath"
UNSUPPORTED_UPDATES = (
    "ModelPackageRegistrationType",
    "CustomerMetadataProperties",
    "CustomerMetadataPropertiesToRemove",
    "AdditionalInferenceSpecificationsToAdd",
    "InferenceSpecification",
    "SourceUri",
    "ModelCard",
    "ModelLifeCycle",
)


def _missing(what: str) -> NotFound:
    return NotFound(f"{what} does not exist.")


def _own(call: Call, ref: str, resource_type: str, what: str) -> str:
    """What ``ref`` names after the type in an ARN of the caller's registry (``ref`` itself
    when it is no ARN); another account's, or another kind's, does not exist."""
    if not ref.startswith("arn:"):
        return ref
    try:
        parsed = Arn.parse(ref)
    except ArnError:
        parsed = None
    if (
        parsed is None
        or parsed.service != "registry"
        or parsed.resource_type != resource_type
        or parsed.account != call.tenant.account_id
    ):
        raise _missing(f"{what} {ref[:200]}")
    return parsed.resource_id


def group_named(call: Call, ref: str) -> str:
    """The group name ``ref`` names in the caller's account (its name or its ARN)."""
    name = _own(call, ref, "model-package-group", "ModelPackageGroup")
    if not valid_group_name(name):
        raise _missing(f"ModelPackageGroup {ref[:200]}")
    return name


def package_named(call: Call, ref: str) -> tuple[str, int]:
    """(group name, version) ``ref`` names: a model package ARN or ``<group>/<version>``."""
    rest = _own(call, ref, "model-package", "ModelPackage")
    group, _, version = rest.rpartition("/")
    if (
        not valid_group_name(group)
        or not version.isdigit()
        or len(version) > 10
        or not 1 <= int(version) <= MAX_VERSION
    ):
        raise _missing(f"ModelPackage {ref[:200]}")
    return group, int(version)


def create_model_package_group(call: Call, p: dict) -> dict:
    name = p["ModelPackageGroupName"]
    if not valid_group_name(name):
        raise validation(
            "ModelPackageGroupName: 1 to 63 letters, digits and hyphens, starting and ending "
            "with a letter or digit"
        )
    if p.get("ManagedConfiguration"):
        raise validation("ManagedConfiguration: not supported here (the service manages storage)")
    arn = model_package_group_arn(call.tenant, name)
    allow(call.request, "registry:CreateModelPackageGroup", arn)
    tags = [{"key": t["Key"], "value": t["Value"]} for t in p.get("Tags") or []]
    try:
        services.group_create(
            tenant=call.tenant,
            actor=call.principal.arn,
            name=name,
            description=p.get("ModelPackageGroupDescription") or "",
            tags=tags,
        )
    except Conflict:
        raise NameInUse(f"Model Package Group already exists: {arn}") from None
    return {"ModelPackageGroupArn": arn}


def describe_model_package_group(call: Call, p: dict) -> dict:
    name = group_named(call, p["ModelPackageGroupName"])
    allow(
        call.request,
        "registry:DescribeModelPackageGroup",
        model_package_group_arn(call.tenant, name),
    )
    group = _group(call, name)
    return {
        "ModelPackageGroupName": group.name,
        "ModelPackageGroupArn": model_package_group_arn(call.tenant, group.name),
        "ModelPackageGroupDescription": group.description or None,
        "CreationTime": group.created_at,
        "CreatedBy": {"IamIdentity": {"Arn": group.created_by}},
        "ModelPackageGroupStatus": "Completed",
    }


def _group(call: Call, name: str) -> ModelPackageGroup:
    try:
        return selectors.group_get(tenant=call.tenant, name=name)
    except NotFound:
        raise _missing(f"ModelPackageGroup {name}") from None


def list_model_packages(call: Call, p: dict) -> dict:
    limit = p.get("MaxResults") or DEFAULT_PAGE
    found = ModelPackage.objects.filter(tenant=call.tenant).select_related("tenant", "group")
    if p.get("ModelPackageGroupName"):
        name = group_named(call, p["ModelPackageGroupName"])
        allow(
            call.request, "registry:ListModelPackages", model_package_group_arn(call.tenant, name)
        )
        found = found.filter(group=_group(call, name))
    else:
        allow(call.request, "registry:ListModelPackages", model_package_group_arn(call.tenant, "*"))
    if p.get("ModelPackageType") == "Unversioned":
        found = found.none()  # every package here is a version of a group
    if p.get("ModelApprovalStatus"):
        found = found.filter(approval_status=p["ModelApprovalStatus"])
    if p.get("NameContains"):
        found = found.filter(group__name__icontains=p["NameContains"])
    found = created_between(found, p)
    descending = p.get("SortOrder", "Ascending") == "Descending"
    keys = ("group__name", "version") if p.get("SortBy") == "Name" else ("created_at", "id")
    found = found.order_by(*(f"-{k}" if descending else k for k in keys))
    offset = offset_of("packages", p.get("NextToken"))
    page = list(found[offset : offset + limit + 1])
    answer: dict = {"ModelPackageSummaryList": [_summary(call, m) for m in page[:limit]]}
    if len(page) > limit:
        answer["NextToken"] = token_of("packages", {"o": offset + limit})
    return answer


def _summary(call: Call, m: ModelPackage) -> dict:
    return {
        "ModelPackageName": m.group.name,
        "ModelPackageGroupName": m.group.name,
        "ModelPackageVersion": m.version,
        "ModelPackageArn": model_package_arn(call.tenant, m.group.name, m.version),
        "ModelPackageDescription": _description(m),
        "CreationTime": m.created_at,
        "ModelPackageStatus": "Completed",
        "ModelApprovalStatus": m.approval_status,
        "ModelPackageRegistrationType": "Registered",
    }


def _description(m: ModelPackage) -> str:
    what = {
        ModelPackage.Kind.TRAINING_STATE: "training state (adapter and optimizer)",
        ModelPackage.Kind.SAMPLER_WEIGHTS: "sampler weights",
        ModelPackage.Kind.MERGED: "merged weights",
    }.get(m.kind, m.kind)
    step = f" at step {m.step}" if m.step is not None else ""
    return f"{what} of {m.base_model}{step}"[:1024]


def _package(call: Call, ref: str, action: str) -> ModelPackage:
    group, version = package_named(call, ref)
    allow(call.request, action, model_package_arn(call.tenant, group, version))
    try:
        return selectors.package_get(tenant=call.tenant, group_name=group, version=version)
    except NotFound:
        raise _missing(f"ModelPackage {ref[:200]}") from None


def describe_model_package(call: Call, p: dict) -> dict:
    m = _package(call, p["ModelPackageName"], "registry:DescribeModelPackage")
    container: dict = {
        "IsCheckpoint": m.kind == ModelPackage.Kind.TRAINING_STATE,
        "BaseModel": {
            "HubContentName": hub.content_name_of(m.base_model),
            "HubContentVersion": hub.CONTENT_VERSION,
        },
        "Environment": {"LOOPWRIGHT_BASE_MODEL": m.base_model[:1024]},
    }
    stored_in_s3 = m.storage_uri.startswith("s3://")
    if stored_in_s3:
        container["ModelDataSource"] = {
            "S3DataSource": {
                "S3Uri": m.storage_uri,
                "S3DataType": "S3Prefix",
                "CompressionType": "None",
            }
        }
    metadata = {TINKER_PATH_KEY: m.tinker_path[:256]}
    if m.session_id:
        metadata["loopwright:SessionId"] = m.session_id
    if m.step is not None:
        metadata["loopwright:Step"] = str(m.step)
    return {
        **_summary(call, m),
        "InferenceSpecification": {"Containers": [container]},
        "ModelPackageStatusDetails": {"ValidationStatuses": []},
        "CreatedBy": {"IamIdentity": {"Arn": m.created_by}},
        "LastModifiedTime": m.approval_updated_at or m.created_at,
        "LastModifiedBy": (
            {"IamIdentity": {"Arn": m.approval_updated_by}} if m.approval_updated_by else None
        ),
        "ApprovalDescription": m.approval_description or None,
        "CustomerMetadataProperties": metadata,
        # weights kept by the service, not in the caller's S3: deleting the package frees them
        "ManagedStorageType": None if stored_in_s3 else "Restricted",
    }


def update_model_package(call: Call, p: dict) -> dict:
    for name in UNSUPPORTED_UPDATES:
        if p.get(name) is not None:
            raise validation(f"{name}: not supported here; UpdateModelPackage changes approvals")
    m = _package(call, p["ModelPackageArn"], "registry:UpdateModelPackageApproval")
    if p.get("ModelApprovalStatus") or p.get("ApprovalDescription") is not None:
        services.package_update_approval(
            tenant=call.tenant,
            actor=call.principal.arn,
            group_name=m.group.name,
            version=m.version,
            status=p.get("ModelApprovalStatus") or m.approval_status,
            description=p.get("ApprovalDescription"),
        )
    return {"ModelPackageArn": model_package_arn(call.tenant, m.group.name, m.version)}


def delete_model_package(call: Call, p: dict) -> dict:
    m = _package(call, p["ModelPackageName"], "registry:DeleteModelPackage")
    services.package_delete(
        tenant=call.tenant, actor=call.principal.arn, group_name=m.group.name, version=m.version
    )
    return {}
