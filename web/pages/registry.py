"""The model package registry: groups, a group's versions, one version (its metadata, lineage and
approval) and its downloads, with the same IAM actions and services as the registry API."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane.edge.callers import allow, can
from controlplane.errors import DomainError, NotFound
from controlplane.iam.resources import model_package_arn, model_package_group_arn
from controlplane.registry import selectors, services
from controlplane.registry.download_response import package_download_response
from controlplane.registry.models import ModelPackage

from ..formkit import Form, page_number, submit
from ..login_required import page
from ..session_ops import step_counter
from ..session_page import lora_view
from ..values import label, number

PER_PAGE = 50
MAX_VERSION = 2**31 - 1


class GroupForm(Form):
    name = forms.CharField(
        max_length=200, help_text="1–63 letters, digits and hyphens, e.g. eval-candidates."
    )
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2, "class": "short"})
    )


class ApprovalForm(Form):
    approval_status = forms.ChoiceField(
        label="Decision", choices=[(s, label(s)) for s in services.APPROVAL_STATUSES]
    )
    approval_description = forms.CharField(
        label="Note",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "short"}),
        help_text="Why, for the record (at most 1024 characters).",
    )


def _group_arn(request: HttpRequest, name: str) -> str:
    """The ARN of the caller's group ``name`` (a name no group can have is not found)."""
    if not selectors.valid_group_name(name):
        raise NotFound(f"model package group {name[:100]!r} not found", field="name")
    return model_package_group_arn(request.tenant, name)


def _version_arn(request: HttpRequest, name: str, version: int) -> str:
    _group_arn(request, name)
    if not 1 <= version <= MAX_VERSION:
        raise NotFound(f"model package {name}/{version} not found", field="version")
    return model_package_arn(request.tenant, name, version)


def _actor(request: HttpRequest) -> str:
    return request.principal.arn


def optimizer_steps(request: HttpRequest, packages) -> dict[int, int]:
    """Each version's optimizer step: how many optimizer steps its run had finished when it was
    saved (the registry records the save's operation number)."""
    before = step_counter(
        tenant=request.tenant, model_ids={p.model_id for p in packages if p.model_id}
    )
    return {p.pk: before(p.model_id, p.step) for p in packages if p.model_id and p.step is not None}


@page
@require_http_methods(["GET", "POST"])
def group_list(request: HttpRequest) -> HttpResponse:
    form = GroupForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":

        def create(data: dict):
            name = services.group_name_checked(data["name"])
            allow(request, "registry:CreateModelPackageGroup", _group_arn(request, name))
            return services.group_create(
                tenant=request.tenant,
                actor=_actor(request),
                name=name,
                description=data["description"],
            )

        group = submit(form, create)
        if group is not None:
            messages.success(request, f"Model package group {group.name} created.")
            return redirect(f"/registry/groups/{group.name}")
    allow(request, "registry:ListModelPackageGroups")
    number = page_number(request.GET.get("page"))
    found, total = selectors.group_list(
        tenant=request.tenant, limit=PER_PAGE, offset=(number - 1) * PER_PAGE
    )
    return render(
        request,
        "web/registry/groups.html",
        {
            "groups": found,
            "page": _pager(number, total),
            "form": form,
            "group_wildcard": model_package_group_arn(request.tenant, "*"),
        },
        status=400 if form.is_bound else 200,
    )


def _pager(number: int, total: int):
    """The Django page ``number`` of ``total`` items (for its previous/next links)."""
    return Paginator(range(total), PER_PAGE).get_page(number)


@page
@require_GET
def group_detail(request: HttpRequest, name: str) -> HttpResponse:
    arn = _group_arn(request, name)
    allow(request, "registry:DescribeModelPackageGroup", arn)
    group = selectors.group_get(tenant=request.tenant, name=name)
    status = request.GET.get("approval_status") or None
    kind = request.GET.get("kind") or None
    if status not in (None, *services.APPROVAL_STATUSES):
        raise DomainError(
            f"approval_status: one of {', '.join(services.APPROVAL_STATUSES)}",
            field="approval_status",
        )
    if kind not in (None, *services.KINDS):
        raise DomainError(f"kind: one of {', '.join(services.KINDS)}", field="kind")
    allow(request, "registry:ListModelPackages", arn)
    number = page_number(request.GET.get("page"))
    found, total = selectors.package_list(
        tenant=request.tenant,
        group=group,
        approval_status=status,
        kind=kind,
        limit=PER_PAGE,
        offset=(number - 1) * PER_PAGE,
    )
    steps = optimizer_steps(request, found)

    def arn_of(p: ModelPackage) -> str:
        return model_package_arn(request.tenant, name, p.version)

    return render(
        request,
        "web/registry/group.html",
        {
            "group": group,
            "arn": arn,
            # the checkpoint's path inside its run (weights/step-3); the version page has it whole
            "versions": [
                {
                    "p": p,
                    "checkpoint": p.tinker_path.split("/", 3)[-1],
                    "step": steps.get(p.pk),
                    "may_approve": can(request, "registry:UpdateModelPackageApproval", arn_of(p)),
                    "may_download": can(request, "registry:DownloadModelPackage", arn_of(p)),
                }
                for p in found
            ],
            "version_count": selectors.group_version_count(group),
            "page": _pager(number, total),
            "statuses": services.APPROVAL_STATUSES,
            "kinds": services.KINDS,
            "chosen": {"approval_status": status or "", "kind": kind or ""},
        },
    )


@page
@require_GET
def version_detail(request: HttpRequest, name: str, version: int) -> HttpResponse:
    arn = _version_arn(request, name, version)
    allow(request, "registry:DescribeModelPackage", arn)
    package = selectors.package_get(tenant=request.tenant, group_name=name, version=version)
    form = ApprovalForm(
        initial={
            "approval_status": package.approval_status,
            "approval_description": package.approval_description,
        }
    )
    return _version_page(request, package, form)


def _version_page(
    request: HttpRequest, package: ModelPackage, form: ApprovalForm, status: int = 200
) -> HttpResponse:
    parent = package.parent
    version_arn = model_package_arn(request.tenant, package.group.name, package.version)
    return render(
        request,
        "web/registry/version.html",
        {
            "package": package,
            "arn": model_package_arn(request.tenant, package.group.name, package.version),
            "parent_arn": (
                model_package_arn(request.tenant, parent.group.name, parent.version)
                if parent
                else None
            ),
            "form": form,
            "optimizer_step": optimizer_steps(request, [package]).get(package.pk),
            "may_approve": can(request, "registry:UpdateModelPackageApproval", version_arn),
            "may_download": can(request, "registry:DownloadModelPackage", version_arn),
            "lora": lora_view(package.lora or {}),
            "metrics": [(k, number(v)) for k, v in (package.metrics or {}).items()],
        },
        status=status,
    )


@page
@require_POST
def version_approval(request: HttpRequest, name: str, version: int) -> HttpResponse:
    arn = _version_arn(request, name, version)
    allow(request, "registry:UpdateModelPackageApproval", arn)
    package = selectors.package_get(tenant=request.tenant, group_name=name, version=version)
    form = ApprovalForm(request.POST)
    updated = submit(
        form,
        lambda data: services.package_update_approval(
            tenant=request.tenant,
            actor=_actor(request),
            group_name=name,
            version=version,
            status=data["approval_status"],
            description=data["approval_description"],
        ),
    )
    if updated is None:
        return _version_page(request, package, form, status=400)
    messages.success(
        request, f"Version {version} of {name} is now {label(updated.approval_status)}."
    )
    if request.POST.get("back") == "group":
        return redirect(f"/registry/groups/{name}")
    return redirect(f"/registry/groups/{name}/versions/{version}")


@page
@require_GET
def version_download(request: HttpRequest, name: str, version: int) -> StreamingHttpResponse:
    """The version as a .tar.gz, exactly as the API serves it; the caller must also be allowed
    to decrypt with the checkpoint's key."""
    fmt = request.GET.get("format") or "adapter"
    optimizer = request.GET.get("include_optimizer", "false").lower() == "true"
    allow(request, "registry:DownloadModelPackage", _version_arn(request, name, version))
    package = selectors.package_get(tenant=request.tenant, group_name=name, version=version)
    return package_download_response(
        package=package,
        format=fmt,
        include_optimizer=optimizer,
        field="version",
        authorize=lambda action, resource: allow(request, action, resource),
        actor=_actor(request),
    )


urlpatterns = [
    path("registry", group_list, name="registry"),
    path("registry/groups/<str:name>", group_detail, name="registry_group"),
    path(
        "registry/groups/<str:name>/versions/<int:version>", version_detail, name="registry_version"
    ),
    path(
        "registry/groups/<str:name>/versions/<int:version>/approval",
        version_approval,
        name="registry_approval",
    ),
    path(
        "registry/groups/<str:name>/versions/<int:version>/download",
        version_download,
        name="registry_download",
    ),
]
