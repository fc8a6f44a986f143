"""The access keys page: the access key pairs (for boto3 and sagemaker-train, which sign with
SigV4) of the logged-in user or of one of the account's roles; a new pair (its secret shown
once, by the page the form redirects to, with the lines that export it) and revocation,
authorized as the API's access key routes."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.access_keys import selectors, services
from controlplane.access_keys.models import AccessKey
from controlplane.access_keys.sealing import access_key_arn
from controlplane.edge.callers import allow, can
from controlplane.iam import services as iam_services

from . import shown_once
from .formkit import submit
from .iam_keys import ME, KeyForm, _owner, _owner_choices, owner_arn
from .login_required import page


def _create(request: HttpRequest, data: dict):
    owner = _owner(request, data["owner"], "iam:CreateAccessKey")
    if data["owner"] != ME:
        # using a role's key is assuming the role: its trust policy must name the caller
        iam_services.trust_required(owner, request.principal.arn, field="owner")
    return services.access_key_create(
        tenant=request.tenant,
        actor=request.principal.arn,
        name=data["name"],
        expires_in_days=data["expires_in_days"],
        **({"role": owner} if data["owner"] != ME else {"user": owner}),
    )


@never_cache  # the page that shows a new secret: no cache may keep it
@page
@require_http_methods(["GET", "POST"])
def access_key_list(request: HttpRequest) -> HttpResponse:
    owners, untrusting = _owner_choices(request)
    form = KeyForm(request.POST if request.method == "POST" else None, owners=owners)
    if request.method == "POST":
        made = submit(form, lambda data: _create(request, data))
        if made is not None:
            key, secret = made
            # post/redirect/get: the secret is shown by the page the browser is sent to, once
            shown_once.keep(
                request, "access-key", key.access_key_id, {"secret": secret, "name": key.name}
            )
            query = urlencode({"owner": form.cleaned_data["owner"], "created": key.access_key_id})
            return redirect(f"/iam/access-keys?{query}")
    created = request.GET.get("created", "")
    fresh = shown_once.take(request, "access-key", created) if created else None
    shown = (request.POST if request.method == "POST" else request.GET).get("owner") or ME
    if shown not in dict(owners):
        shown = ME
    owner = _owner(request, shown, "iam:ListAccessKeys")
    found = selectors.access_keys(tenant=request.tenant)
    found = found.filter(role=owner) if shown != ME else found.filter(user=owner)
    now = timezone.now()
    rows = [(k, selectors.key_status(k, now), _may_revoke(request, k)) for k in found]
    if not form.is_bound:
        form = KeyForm(owners=owners, initial={"owner": shown})
    return render(
        request,
        "web/iam/access_keys.html",
        {
            "rows": rows,
            "owners": owners,
            "shown": shown,
            "shown_label": dict(owners)[shown],
            "form": form,
            "created": created,
            "fresh": fresh,
            "base_url": request.build_absolute_uri("/").rstrip("/"),
            "region": settings.AWS_REGION,
            "untrusting": untrusting,
            "may_create": can(request, "iam:CreateAccessKey", request.principal.arn),
        },
        status=400 if form.is_bound else 200,
    )


def _may_revoke(request: HttpRequest, key: AccessKey) -> bool:
    return can(
        request,
        "iam:RevokeAccessKey",
        access_key_arn(request.tenant.account_id, key.access_key_id),
        **{"iam:ApiKeyOwner": owner_arn(key)},
    )


@page
@require_POST
def access_key_revoke(request: HttpRequest, access_key_id: str) -> HttpResponse:
    key = selectors.access_key_get(tenant=request.tenant, access_key_id=access_key_id)
    allow(
        request,
        "iam:RevokeAccessKey",
        access_key_arn(request.tenant.account_id, key.access_key_id),
        **{"iam:ApiKeyOwner": owner_arn(key)},
    )
    services.access_key_revoke(key=key, actor=request.principal.arn)
    messages.success(
        request, f"Access key {key.access_key_id} ({key.name}) revoked: it no longer signs."
    )
    back = f"role:{key.role.name}" if key.role_id else ME
    return redirect(f"/iam/access-keys?{urlencode({'owner': back})}")
