"""The API keys page: the keys of the logged-in user or of one of the account's roles, a new key
(its raw value shown once, by the page the form redirects to) and revocation, authorized as the
API's key routes. A role whose trust policy does not name the person is marked, with the way to
change it."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.edge.callers import allow, can, may
from controlplane.iam import selectors, services
from controlplane.iam.models import ApiKey
from controlplane.iam.resources import api_key_arn, user_arn
from controlplane.metering.reports import usage_report

from . import shown_once
from .formkit import Form, submit
from .login_required import page

ME = "me"


class KeyForm(Form):
    name = forms.CharField(max_length=200, help_text="What the key is for, e.g. laptop or CI.")
    owner = forms.ChoiceField(
        label="Acts as",
        help_text="Yourself, or a role whose trust policy lets you assume it.",
    )
    expires_in_days = forms.IntegerField(
        label="Expires after (days)",
        required=False,
        min_value=1,
        max_value=services.MAX_KEY_DAYS,
        help_text=f"1 to {services.MAX_KEY_DAYS}; empty: never expires.",
    )

    def __init__(self, *args, owners: list[tuple[str, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["owner"].choices = owners


def _owner_choices(request: HttpRequest) -> tuple[list[tuple[str, str]], list]:
    """You, and the account's roles when you may list them; and the roles whose trust policy
    does not let you assume them (a key for them would be refused)."""
    choices = [(ME, f"You ({request.principal.arn})")]
    untrusting = []
    if may(request, "iam:ListRoles"):
        for role in selectors.roles(tenant=request.tenant):
            if services.role_trusts(role, request.principal.arn):
                choices.append((f"role:{role.name}", f"Role {role.name}"))
            else:
                choices.append((f"role:{role.name}", f"Role {role.name} (does not trust you)"))
                untrusting.append(role)
    return choices, untrusting


def _owner(request: HttpRequest, choice: str, action: str):
    """The user or role that ``choice`` names, once ``action`` is allowed on it."""
    if choice.startswith("role:"):
        role = selectors.role_get(tenant=request.tenant, name=choice[5:], field="owner")
        allow(request, action, role.arn)
        return role
    allow(request, action, request.principal.arn)
    return request.principal.user


def key_status(key: ApiKey, now) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


def _create(request: HttpRequest, data: dict):
    owner = _owner(request, data["owner"], "iam:CreateApiKey")
    if data["owner"] != ME:
        # using a role's key is assuming the role: its trust policy must name the caller
        services.trust_required(owner, request.principal.arn, field="owner")
    return services.api_key_create(
        tenant=request.tenant,
        name=data["name"],
        expires_in_days=data["expires_in_days"],
        **({"role": owner} if data["owner"] != ME else {"user": owner}),
    )


@never_cache  # the page that shows a new key's raw value: no cache may keep it
@page
@require_http_methods(["GET", "POST"])
def key_list(request: HttpRequest) -> HttpResponse:
    owners, untrusting = _owner_choices(request)
    form = KeyForm(request.POST if request.method == "POST" else None, owners=owners)
    if request.method == "POST":
        made = submit(form, lambda data: _create(request, data))
        if made is not None:
            key, raw = made
            # post/redirect/get: the key is shown by the page the browser is sent to, once
            shown_once.keep(request, "key", key.prefix, {"raw": raw, "name": key.name})
            owner = form.cleaned_data["owner"]
            return redirect(f"/iam/keys?{urlencode({'owner': owner, 'created': key.prefix})}")
    created = request.GET.get("created", "")
    fresh = shown_once.take(request, "key", created) if created else None
    shown = (request.POST if request.method == "POST" else request.GET).get("owner") or ME
    if shown not in dict(owners):
        shown = ME
    owner = _owner(request, shown, "iam:ListApiKeys")
    found = selectors.api_keys(tenant=request.tenant)
    found = found.filter(role=owner) if shown != ME else found.filter(user=owner)
    now = timezone.now()
    rows = [(k, key_status(k, now), _may_revoke(request, k)) for k in found]
    spent = key_costs(request, now) if may(request, "billing:GetUsageReport") else None
    for key, _, _ in rows:
        key.spent = spent.get(key.prefix, Decimal(0)) if spent is not None else None
    if not form.is_bound:
        form = KeyForm(owners=owners, initial={"owner": shown})
    may_create = can(request, "iam:CreateApiKey", request.principal.arn)
    return render(
        request,
        "web/iam/keys.html",
        {
            "rows": rows,
            "spent": spent,
            "month_start": now.date().replace(day=1),
            "owners": owners,
            "shown": shown,
            "shown_label": dict(owners)[shown],
            "form": form,
            "created": created,
            "fresh": fresh,
            "untrusting": untrusting,
            "may_create": may_create,
            "may_edit_trust": {
                r.name for r in untrusting if can(request, "iam:UpdateAssumeRolePolicy", r.arn)
            },
        },
        status=400 if form.is_bound else 200,
    )


def key_costs(request: HttpRequest, now) -> dict[str, Decimal]:
    """What each of the account's API keys has spent this month (UTC), by key prefix."""
    today = now.astimezone(UTC).date()
    report = usage_report(
        tenant=request.tenant, start=today.replace(day=1), end=today, group_by=("api_key",)
    )
    out: dict[str, Decimal] = {}
    for line in report.lines:
        prefix = dict(line.key).get("api_key") or ""
        out[prefix] = out.get(prefix, Decimal(0)) + line.cost
    return out


def owner_arn(key) -> str:
    """The ARN of the principal a key (an API key, an access key pair) acts as."""
    return key.role.arn if key.role_id else user_arn(key.tenant, key.user.get_username())


def _may_revoke(request: HttpRequest, key: ApiKey) -> bool:
    owner = owner_arn(key)
    return can(
        request,
        "iam:RevokeApiKey",
        api_key_arn(request.tenant, key.prefix),
        **{"iam:ApiKeyOwner": owner},
    )


@page
@require_POST
def key_revoke(request: HttpRequest, prefix: str) -> HttpResponse:
    key = selectors.api_key_get(tenant=request.tenant, prefix=prefix)
    owner = owner_arn(key)
    allow(
        request,
        "iam:RevokeApiKey",
        api_key_arn(request.tenant, prefix),
        **{"iam:ApiKeyOwner": owner},
    )
    services.api_key_revoke(key=key)
    messages.success(request, f"API key {prefix} ({key.name}) revoked: it no longer works.")
    back = f"role:{key.role.name}" if key.role_id else ME
    return redirect(f"/iam/keys?{urlencode({'owner': back})}")
