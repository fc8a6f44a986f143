"""The policy simulator: would a member or a role of this account be allowed an action on a
resource? Evaluated with the same policies and evaluator as a real request, but not audited as
one (the page itself is: reading the principal's policies is ``iam:GetUser`` / ``iam:GetRole``).
"""

from __future__ import annotations

import json
from functools import cache

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane.iam import selectors as iam_selectors
from controlplane.iam.access import request_context
from controlplane.iam.actions import ACTIONS, RESOURCE_TYPES, SERVICES
from controlplane.iam.evaluation import AccessRequest, Decision, evaluate
from controlplane.iam.principals import Principal, for_membership, for_role
from controlplane.iam.resources import user_arn
from controlplane.tenants import selectors as tenants

from .context import allow, page
from .formkit import Form

MAX_RESOURCE = 1000
MAX_CONTEXT = 4000


@cache
def catalogue() -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The documented actions by service: (name, resource type, description)."""
    by_service: dict[str, list[tuple[str, str, str]]] = {s: [] for s in SERVICES}
    for spec in ACTIONS.values():
        by_service[spec.service].append((spec.name, spec.resource_type, spec.description))
    return list(by_service.items())


def arn_format(account: str, resource_type: str) -> str:
    """What a resource of ``resource_type`` looks like in this account (``*`` for none)."""
    for service, types in RESOURCE_TYPES.items():
        if resource_type in types:
            return f"arn:loopwright:{service}::{account}:{resource_type}/…"
    return "*"


class SimulatorForm(Form):
    principal = forms.ChoiceField(
        label="Principal", help_text="A member or a role of this account."
    )
    action = forms.ChoiceField(label="Action")
    resource = forms.CharField(
        label="Resource",
        required=False,
        max_length=MAX_RESOURCE,
        help_text="An ARN, or * for account-wide actions (the default).",
    )

    context = forms.CharField(
        label="Condition keys",
        required=False,
        max_length=MAX_CONTEXT,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=(
            'A JSON object of condition keys and their values, e.g. {"loopwright:SourceIp": '
            '"203.0.113.7", "loopwright:CurrentTime": "2026-12-01T09:00:00Z"}; they replace '
            "what this page's own request supplies."
        ),
    )

    def clean_context(self) -> dict:
        text = self.cleaned_data["context"].strip()
        if not text:
            return {}
        try:
            values = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(values, dict):
            raise forms.ValidationError('a JSON object: {"key": value, …}')
        for key, value in values.items():
            if not 0 < len(key) <= 200:
                raise forms.ValidationError("condition keys: 1 to 200 characters each")
            items = value if isinstance(value, list) else [value]
            if len(items) > 50 or not all(isinstance(v, str | int | float | bool) for v in items):
                raise forms.ValidationError(
                    f"{key}: a string, number or boolean, or a list of at most 50 of them"
                )
        return values

    def __init__(self, *args, principals, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["principal"].choices = principals
        self.fields["action"].choices = [
            (service, [(name, name) for name, _, _ in actions]) for service, actions in catalogue()
        ]


def _principal(request: HttpRequest, choice: str) -> Principal:
    """The member or role ``choice`` names, once reading it is allowed."""
    kind, _, name = choice.partition(":")
    if kind == "role":
        role = iam_selectors.role_get(tenant=request.tenant, name=name, field="principal")
        allow(request, "iam:GetRole", role.arn)
        return for_role(role)
    allow(request, "iam:GetUser", user_arn(request.tenant, name))
    return for_membership(tenants.membership_get(tenant=request.tenant, username=name))


def _statement(principal: Principal, decision: Decision) -> str | None:
    """The JSON of the statement that decided, as written in its policy."""
    for name, document in principal.policies():
        if name != decision.policy:
            continue
        for statement in document.statements:
            if statement.label == decision.statement:
                return json.dumps(statement.to_dict(), indent=2)
    return None


@page
@require_GET
def simulator(request: HttpRequest) -> HttpResponse:
    allow(request, "iam:ListUsers")
    allow(request, "iam:ListRoles")
    members = tenants.memberships(tenant=request.tenant)
    roles = iam_selectors.roles(tenant=request.tenant)
    principals = [
        ("Members", [(f"user:{m.user.get_username()}", m.user.get_username()) for m in members]),
        ("Roles", [(f"role:{r.name}", r.name) for r in roles]),
    ]
    asked = "action" in request.GET  # a link may name only the principal, to start from it
    form = SimulatorForm(
        request.GET if asked else None,
        principals=principals,
        initial={"principal": request.GET.get("principal"), "resource": "*"},
    )
    result = None
    if asked and form.is_valid():
        data = form.cleaned_data
        who = _principal(request, data["principal"])
        resource = data["resource"].strip() or "*"
        values = request_context(who) | data["context"]
        decision = evaluate(
            who.policies(), AccessRequest(data["action"], resource, who.arn, values)
        )
        spec = ACTIONS[data["action"]]
        result = {
            "principal": who,
            "action": spec,
            "resource": resource,
            "decision": decision,
            "context": json.dumps(data["context"], indent=2) if data["context"] else "",
            "statement": _statement(who, decision),
            "policies": [name for name, _ in who.policies()],
            "arn_format": arn_format(request.tenant.account_id, spec.resource_type),
        }
    return render(
        request,
        "web/iam/simulator.html",
        {"form": form, "result": result, "catalogue": catalogue()},
        status=400 if asked and not form.is_valid() else 200,
    )
