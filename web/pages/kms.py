"""KMS keys of the account: list, create, one key's state, versions and changes (enable, disable,
rotate, schedule or cancel deletion), with the same IAM actions and services as the KMS API. No
page ever holds key material."""

from __future__ import annotations

from collections.abc import Callable

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane.audit.outcomes import note_failure
from controlplane.edge.callers import allow
from controlplane.errors import DomainError
from controlplane.kms import services
from controlplane.kms.models import KmsKey

from ..formkit import FIXABLE, Form, submit
from ..login_required import page


class KeyForm(Form):
    description = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "short"}),
        help_text="What it protects.",
    )
    alias = forms.CharField(
        required=False,
        max_length=300,
        help_text="Optional, e.g. alias/team/checkpoints (alias/ then letters, digits, / _ -).",
    )
    provider = forms.ChoiceField(
        choices=KmsKey.Provider.choices,
        help_text="Loopwright keeps the material wrapped under the server's master key; AWS KMS "
        "keeps it in your AWS account.",
    )
    aws_key_id = forms.CharField(
        label="AWS key id",
        required=False,
        max_length=2048,
        help_text="AWS only: an existing symmetric key's id or ARN; empty: a new one is made.",
    )


class DeletionForm(Form):
    pending_window_days = forms.IntegerField(
        label="Waiting period (days)",
        initial=services.DEFAULT_WINDOW_DAYS,
        help_text=f"{services.MIN_WINDOW_DAYS} to {services.MAX_WINDOW_DAYS}; until then you can "
        "cancel. Afterwards everything it sealed can never be opened again.",
    )


def _actor(request: HttpRequest) -> str:
    return request.principal.arn


def _key(request: HttpRequest, key_id: str, action: str) -> KmsKey:
    """The account's key (by id, ARN or alias), once ``action`` is allowed on its ARN."""
    key = services.key_resolve(tenant=request.tenant, ref=key_id)
    allow(request, action, key.arn)
    return key


@page
@require_http_methods(["GET", "POST"])
def key_list(request: HttpRequest) -> HttpResponse:
    form = KeyForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        allow(request, "kms:CreateKey")
        key = submit(
            form,
            lambda d: services.key_create(
                tenant=request.tenant,
                actor=_actor(request),
                description=d["description"],
                alias=d["alias"] or None,
                provider=d["provider"],
                aws_key_id=d["aws_key_id"] or None,
            ),
        )
        if key is not None:
            messages.success(request, f"Key {key.alias or key.id} created and enabled.")
            return redirect(f"/kms/keys/{key.id}")
    allow(request, "kms:ListKeys")
    keys = services.key_list(tenant=request.tenant, actor=_actor(request))
    return render(
        request,
        "web/kms/keys.html",
        {"keys": keys, "form": form},
        status=400 if form.is_bound else 200,
    )


def _detail(
    request: HttpRequest,
    key: KmsKey,
    *,
    deletion: DeletionForm | None = None,
    refusal: str = "",
    status: int = 200,
) -> HttpResponse:
    versions = list(key.versions.order_by("-version").values("version", "created_at"))
    return render(
        request,
        "web/kms/key.html",
        {
            "key": key,
            "versions": versions,
            "deletion": deletion or DeletionForm(),
            "refusal": refusal,
            "states": KmsKey.State,
        },
        status=status,
    )


@page
@require_GET
def key_detail(request: HttpRequest, key_id: str) -> HttpResponse:
    return _detail(request, _key(request, key_id, "kms:DescribeKey"))


def _changed(request: HttpRequest, key: KmsKey, change: Callable[[], KmsKey], done: str):
    """Run ``change``; a refusal (a key pending deletion cannot be disabled, …) is shown on the
    key's page, next to its actions."""
    try:
        changed = change()
    except DomainError as exc:
        if exc.status not in FIXABLE:
            raise
        note_failure(exc.detail)
        return _detail(request, key, refusal=exc.detail, status=exc.status)
    messages.success(request, f"Key {changed.alias or changed.id} {done}.")
    return redirect(f"/kms/keys/{changed.id}")


def _state_change(action: str, change: Callable[..., KmsKey], done: str):
    """A view for a body-less change of one key's state."""

    @page
    @require_POST
    def view(request: HttpRequest, key_id: str) -> HttpResponse:
        key = _key(request, key_id, action)
        return _changed(
            request,
            key,
            lambda: change(tenant=request.tenant, actor=_actor(request), key_id=str(key.id)),
            done,
        )

    return view


@page
@require_POST
def key_schedule_deletion(request: HttpRequest, key_id: str) -> HttpResponse:
    key = _key(request, key_id, "kms:ScheduleKeyDeletion")
    form = DeletionForm(request.POST)
    if not form.is_valid():
        return _detail(request, key, deletion=form, status=400)
    try:
        changed = services.key_schedule_deletion(
            tenant=request.tenant,
            actor=_actor(request),
            key_id=str(key.id),
            pending_window_days=form.cleaned_data["pending_window_days"],
        )
    except DomainError as exc:
        if exc.status not in FIXABLE:
            raise
        if exc.field != "pending_window_days":
            note_failure(exc.detail)
            return _detail(request, key, refusal=exc.detail, status=exc.status)
        form.add_domain_error(exc)
        return _detail(request, key, deletion=form, status=400)
    messages.success(
        request,
        f"Key {changed.alias or changed.id} will be deleted on {changed.deletion_date:%Y-%m-%d}; "
        "cancel before then to keep it.",
    )
    return redirect(f"/kms/keys/{changed.id}")


key_disable = _state_change("kms:DisableKey", services.key_disable, "disabled")
key_enable = _state_change("kms:EnableKey", services.key_enable, "enabled")
key_rotate = _state_change("kms:RotateKey", services.key_rotate, "rotated")
key_cancel_deletion = _state_change(
    "kms:CancelKeyDeletion",
    services.key_cancel_deletion,
    "is no longer scheduled for deletion; it is disabled until you enable it",
)

urlpatterns = [
    path("kms", key_list, name="kms"),
    path("kms/keys/<str:key_id>", key_detail, name="kms_key"),
    path("kms/keys/<str:key_id>/disable", key_disable, name="kms_key_disable"),
    path("kms/keys/<str:key_id>/enable", key_enable, name="kms_key_enable"),
    path("kms/keys/<str:key_id>/rotate", key_rotate, name="kms_key_rotate"),
    path(
        "kms/keys/<str:key_id>/schedule-deletion",
        key_schedule_deletion,
        name="kms_key_schedule_deletion",
    ),
    path(
        "kms/keys/<str:key_id>/cancel-deletion", key_cancel_deletion, name="kms_key_cancel_deletion"
    ),
]
