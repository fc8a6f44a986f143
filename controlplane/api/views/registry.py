"""The model package registry: groups, their versions (one per saved checkpoint), approvals and
downloads.

A group is named in the URL; a version by its group and number, or by ``tinker://`` path or ARN.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.http import StreamingHttpResponse
from rest_framework.decorators import api_view
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.errors import DomainError, NotFound
from controlplane.iam.resources import model_package_arn, model_package_group_arn
from controlplane.registry import downloads, selectors, services
from controlplane.registry.download_response import package_download_response
from controlplane.registry.models import ModelPackage, ModelPackageGroup

from .. import bodies
from ..parsing import body_of, query_int, text

MAX_VERSION = 2**31 - 1
MAX_PATH = 1000


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def group_json(g: ModelPackageGroup, version_count: int | None = None) -> dict:
    shown = {
        "model_package_group_name": g.name,
        "model_package_group_arn": model_package_group_arn(g.tenant, g.name),
        "description": g.description,
        "tags": g.tags,
        "latest_version": g.latest_version or None,
        "created_at": _iso(g.created_at),
        "created_by": g.created_by,
    }
    if version_count is not None:
        shown["version_count"] = version_count
    return shown


def package_json(p: ModelPackage) -> dict:
    parent = p.parent
    return {
        "model_package_arn": model_package_arn(p.tenant, p.group.name, p.version),
        "model_package_group_name": p.group.name,
        "model_package_group_arn": model_package_group_arn(p.tenant, p.group.name),
        "version": p.version,
        "kind": p.kind,
        "base_model": p.base_model,
        "lora": p.lora,
        "session_id": p.session_id or None,
        "model_id": p.model_id or None,
        "step": p.step,
        "metrics": p.metrics,
        "tinker_path": p.tinker_path,
        "weights_available": p.checkpoint_id is not None,
        "storage_uri": p.storage_uri or None,
        "sha256": p.sha256 or None,
        "size_bytes": p.size_bytes,
        "kms_key_arn": p.kms_key_arn or None,
        "approval_status": p.approval_status,
        "approval_description": p.approval_description,
        "approval_updated_by": p.approval_updated_by or None,
        "approval_updated_at": _iso(p.approval_updated_at),
        "parent_model_package_arn": (
            model_package_arn(p.tenant, parent.group.name, parent.version) if parent else None
        ),
        "created_at": _iso(p.created_at),
        "created_by": p.created_by,
        "expires_at": _iso(p.expires_at),
    }


def _actor(request: Request) -> str:
    return principal_of(request).arn


def _group_arn(request: Request, name: str) -> str:
    """The ARN of the caller's group ``name`` (a name no group can have is not found)."""
    if not selectors.valid_group_name(name):
        raise NotFound(f"model package group {name[:100]!r} not found", field="name")
    return model_package_group_arn(tenant_of(request), name)


def _version_arn(request: Request, name: str, version: int) -> str:
    _group_arn(request, name)
    if not 1 <= version <= MAX_VERSION:
        raise NotFound(f"model package {name}/{version} not found", field="version")
    return model_package_arn(tenant_of(request), name, version)


def _choice(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    value = request.query_params.get(name)
    if value and value not in choices:
        raise DomainError(f"{name}: one of {', '.join(choices)}", field=name)
    return value or None


def _flag(request: Request, name: str) -> bool:
    value = (request.query_params.get(name) or "false").lower()
    if value not in ("true", "false"):
        raise DomainError(f"{name}: true or false", field=name)
    return value == "true"


def _paging(request: Request) -> tuple[int, int]:
    limit = query_int(request, "limit", 100, 1, 1000)
    offset = query_int(request, "offset", 0, 0, 2**31)
    assert limit is not None and offset is not None  # noqa: S101 — an invariant of this code, not a check of input
    return limit, offset


@api_view(["GET", "POST"])
def groups(request: Request) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        limit, offset = _paging(request)
        allow(request, "registry:ListModelPackageGroups")
        found, total = selectors.group_list(tenant=tenant, limit=limit, offset=offset)
        return Response(
            {
                "model_package_groups": [group_json(g) for g in found],
                "cursor": {"offset": offset, "limit": limit, "total_count": total},
            }
        )
    body = body_of(request, bodies.GroupCreateBody)
    name = services.group_name_checked(body.get("name"))
    description = text(body, "description", services.MAX_DESCRIPTION, required=False)
    tags = services.tags_checked(body.get("tags"))
    allow(request, "registry:CreateModelPackageGroup", model_package_group_arn(tenant, name))
    group = services.group_create(
        tenant=tenant, actor=_actor(request), name=name, description=description, tags=tags
    )
    return Response(group_json(group, 0), status=201)


@api_view(["GET", "DELETE"])
def group(request: Request, name: str) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "registry:DescribeModelPackageGroup", _group_arn(request, name))
        found = selectors.group_get(tenant=tenant, name=name)
        return Response(group_json(found, selectors.group_version_count(found)))
    force = _flag(request, "force")
    allow(request, "registry:DeleteModelPackageGroup", _group_arn(request, name))
    services.group_delete(tenant=tenant, actor=_actor(request), name=name, force=force)
    return Response(status=204)


@api_view(["GET"])
def versions(request: Request, name: str) -> Response:
    tenant = tenant_of(request)
    status = _choice(request, "approval_status", services.APPROVAL_STATUSES)
    kind = _choice(request, "kind", services.KINDS)
    limit, offset = _paging(request)
    allow(request, "registry:ListModelPackages", _group_arn(request, name))
    found, total = selectors.package_list(
        tenant=tenant,
        group=selectors.group_get(tenant=tenant, name=name),
        approval_status=status,
        kind=kind,
        limit=limit,
        offset=offset,
    )
    return Response(
        {
            "model_packages": [package_json(p) for p in found],
            "cursor": {"offset": offset, "limit": limit, "total_count": total},
        }
    )


@api_view(["GET", "PATCH", "DELETE"])
def version(request: Request, name: str, version: int) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "registry:DescribeModelPackage", _version_arn(request, name, version))
        return Response(
            package_json(selectors.package_get(tenant=tenant, group_name=name, version=version))
        )
    if request.method == "DELETE":
        allow(request, "registry:DeleteModelPackage", _version_arn(request, name, version))
        services.package_delete(
            tenant=tenant, actor=_actor(request), group_name=name, version=version
        )
        return Response(status=204)
    body = body_of(request, bodies.ApprovalBody)
    status = text(body, "approval_status", 32)
    if status not in services.APPROVAL_STATUSES:
        raise DomainError(
            f"approval_status: one of {', '.join(services.APPROVAL_STATUSES)}",
            field="approval_status",
        )
    description = body.get("approval_description")
    if description is not None:
        description = text(body, "approval_description", services.MAX_DESCRIPTION, required=False)
    allow(request, "registry:UpdateModelPackageApproval", _version_arn(request, name, version))
    updated = services.package_update_approval(
        tenant=tenant,
        actor=_actor(request),
        group_name=name,
        version=version,
        status=status,
        description=description,
    )
    return Response(package_json(updated))


def _path(request: Request) -> str:
    path = request.query_params.get("path")
    if not path:
        raise DomainError("path is required: a tinker:// path or a model package ARN", field="path")
    if len(path) > MAX_PATH:
        raise DomainError(f"path: at most {MAX_PATH} characters", field="path")
    return path


@api_view(["GET"])
def version_by_path(request: Request) -> Response:
    package = selectors.package_by_path(tenant=tenant_of(request), path=_path(request))
    allow(
        request,
        "registry:DescribeModelPackage",
        model_package_arn(package.tenant, package.group.name, package.version),
    )
    return Response(package_json(package))


# -- downloads ---------------------------------------------------------------------------------
class GzipOrJSON(BaseContentNegotiation):
    """Downloads answer gzip (errors JSON) whatever the client accepts; their ``format`` query
    parameter names what the archive holds, not a renderer."""

    def select_parser(self, request: Request, parsers: list) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: list, format_suffix: str | None = None
    ) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type


def _download_view(func: Callable) -> Callable:
    func.content_negotiation_class = GzipOrJSON  # type: ignore[attr-defined]
    return api_view(["GET"])(func)


def _download_options(request: Request) -> tuple[str, bool]:
    fmt = _choice(request, "format", downloads.FORMATS) or "adapter"
    return fmt, _flag(request, "include_optimizer")


def _download(
    request: Request, package: ModelPackage, fmt: str, optimizer: bool, field: str
) -> StreamingHttpResponse:
    return package_download_response(
        package=package,
        format=fmt,
        include_optimizer=optimizer,
        field=field,
        authorize=lambda action, resource: allow(request, action, resource),
        actor=_actor(request),
    )


@_download_view
def version_download(request: Request, name: str, version: int) -> StreamingHttpResponse:
    fmt, optimizer = _download_options(request)
    allow(request, "registry:DownloadModelPackage", _version_arn(request, name, version))
    package = selectors.package_get(tenant=tenant_of(request), group_name=name, version=version)
    return _download(request, package, fmt, optimizer, "version")


@_download_view
def download_by_path(request: Request) -> StreamingHttpResponse:
    path = _path(request)
    fmt, optimizer = _download_options(request)
    package = selectors.package_by_path(tenant=tenant_of(request), path=path)
    allow(
        request,
        "registry:DownloadModelPackage",
        model_package_arn(package.tenant, package.group.name, package.version),
    )
    return _download(request, package, fmt, optimizer, "path")
