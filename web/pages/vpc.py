"""The account's network and storage: the VPC subnets its sessions may name in ``vpc_config`` and
the S3 locations they may write checkpoints to, and which recent sessions use which subnet.

Registering a subnet or a location is the service operator's act (it vouches that the subnet or
bucket is this account's), as with ``manage.py vpc_subnets`` / ``storage_locations``: the forms
are shown to operators (staff users) only, and each change is audited as an operator change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from controlplane.audit.services import audit_operator
from controlplane.edge.callers import allow, may
from controlplane.errors import AccessDenied
from controlplane.tenants import services
from controlplane.tenants.models import StorageLocation, Subnet
from controlplane.training_sessions import selectors as sessions

from ..formkit import Form, submit
from ..login_required import page

RECENT_SESSIONS = 200  # how far back "which sessions use it" looks


class SubnetForm(Form):
    id_prefix = "subnet"
    subnet_id = forms.CharField(
        label="Subnet id", max_length=32, help_text="subnet- then 8 to 17 lowercase hex digits."
    )
    description = forms.CharField(required=False, max_length=200)


class LocationForm(Form):
    id_prefix = "location"
    uri = forms.CharField(label="S3 location", max_length=1024, help_text="s3://bucket[/prefix]")
    description = forms.CharField(required=False, max_length=200)


def _operator(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise AccessDenied(
            "only an operator of the service registers subnets and storage locations "
            "(manage.py vpc_subnets / storage_locations)"
        )


def _reason(request: HttpRequest) -> str:
    return f"from the dashboard by operator {request.user.get_username()}"


def _usage(request: HttpRequest) -> dict[str, list[str]] | None:
    """Subnet id → ids of recent sessions that name it (None when sessions may not be listed)."""
    if not may(request, "sessions:ListTrainingSessions"):
        return None
    used: dict[str, list[str]] = {}
    for s in sessions.session_list(tenant=request.tenant, limit=RECENT_SESSIONS):
        for subnet in ((s.platform or {}).get("vpc_config") or {}).get("subnets") or ():
            used.setdefault(subnet, []).append(s.id)
    return used


@dataclass(frozen=True)
class Registered:
    """One of the two things an operator registers to an account: its form, its services, its
    audit actions and how the page names it."""

    form: type[Form]
    field: str  # the form field, and the record's attribute, that names one
    register: Callable[..., Any]  # the service: (tenant, name, description) -> the record
    deregister: Callable[..., None]  # the service: (tenant, name)
    register_action: str
    deregister_action: str
    noun: str  # "Subnet" or "Storage location"

    def add(self, request: HttpRequest) -> HttpResponse:
        _operator(request)
        form = self.form(request.POST)
        record = submit(
            form,
            lambda d: self.register(request.tenant, d[self.field], d["description"]),
        )
        if record is None:
            return _page(request, {self.field: form}, status=400)
        name = getattr(record, self.field)
        audit_operator(
            tenant=request.tenant,
            action=self.register_action,
            resource=name,
            reason=_reason(request),
        )
        messages.success(request, f"{self.noun} {name} registered to this account.")
        return redirect("/vpc")

    def remove(self, request: HttpRequest, name: str) -> HttpResponse:
        _operator(request)
        self.deregister(request.tenant, name)
        audit_operator(
            tenant=request.tenant,
            action=self.deregister_action,
            resource=name,
            reason=_reason(request),
        )
        messages.success(request, f"{self.noun} {name} deregistered.")
        return redirect("/vpc")


SUBNETS = Registered(
    form=SubnetForm,
    field="subnet_id",
    register=lambda tenant, name, description: services.subnet_register(
        tenant=tenant, subnet_id=name, description=description
    ),
    deregister=lambda tenant, name: services.subnet_deregister(tenant=tenant, subnet_id=name),
    register_action="vpc:RegisterSubnet",
    deregister_action="vpc:DeregisterSubnet",
    noun="Subnet",
)
LOCATIONS = Registered(
    form=LocationForm,
    field="uri",
    register=lambda tenant, name, description: services.storage_location_register(
        tenant=tenant, uri=name, description=description
    ),
    deregister=lambda tenant, name: services.storage_location_deregister(tenant=tenant, uri=name),
    register_action="storage:RegisterLocation",
    deregister_action="storage:DeregisterLocation",
    noun="Storage location",
)


def _page(request, forms_shown: dict | None = None, status=200) -> HttpResponse:
    """The page; ``forms_shown`` (field → form) keeps a refused form's input and errors."""
    allow(request, "vpc:ListSubnets")
    allow(request, "storage:ListLocations")
    used = _usage(request)
    subnets = Subnet.objects.filter(tenant=request.tenant).order_by("subnet_id")
    rows = [(s, (used or {}).get(s.subnet_id, [])) for s in subnets]
    shown = forms_shown or {}
    return render(
        request,
        "web/vpc/vpc.html",
        {
            "subnets": rows,
            "usage_known": used is not None,
            "locations": StorageLocation.objects.filter(tenant=request.tenant).order_by("uri"),
            "operator": request.user.is_staff,
            "subnet_form": shown.get(SUBNETS.field) or SubnetForm(),
            "location_form": shown.get(LOCATIONS.field) or LocationForm(),
        },
        status=status,
    )


@page
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    return _page(request)


@page
@require_POST
def subnet_add(request: HttpRequest) -> HttpResponse:
    return SUBNETS.add(request)


@page
@require_POST
def subnet_remove(request: HttpRequest, subnet_id: str) -> HttpResponse:
    return SUBNETS.remove(request, subnet_id)


@page
@require_POST
def location_add(request: HttpRequest) -> HttpResponse:
    return LOCATIONS.add(request)


@page
@require_POST
def location_remove(request: HttpRequest) -> HttpResponse:
    return LOCATIONS.remove(request, request.POST.get("uri", ""))


urlpatterns = [
    path("vpc", overview, name="vpc"),
    path("vpc/subnets", subnet_add, name="vpc_subnet_add"),
    path("vpc/subnets/<str:subnet_id>/deregister", subnet_remove, name="vpc_subnet_remove"),
    path("vpc/locations", location_add, name="vpc_location_add"),
    path("vpc/locations/deregister", location_remove, name="vpc_location_remove"),
]
