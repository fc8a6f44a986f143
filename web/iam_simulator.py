"""The policy simulator: would a member or a role of this account be allowed some actions (one
or many, picked from a searchable list) on a resource (``*`` or an ARN of this account, checked
before anything is evaluated)? Evaluated with the same policies and evaluator as a real request,
but not audited as one (the page itself is: reading the principal's policies is ``iam:GetUser`` /
``iam:GetRole``)."""

from __future__ import annotations

import json
from functools import cache

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane.edge.callers import allow
from controlplane.iam import selectors as iam_selectors
from controlplane.iam.access import request_context
from controlplane.iam.actions import ACTIONS, RESOURCE_TYPES, SERVICES
from controlplane.iam.arns import Arn, ArnError
from controlplane.iam.evaluation import AccessRequest, Decision, evaluate
from controlplane.iam.principals import Principal, for_membership, for_role
from controlplane.iam.resources import user_arn
from controlplane.tenants import selectors as tenants

from .formkit import Form
from .login_required import page

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
    action = forms.MultipleChoiceField(
        label="Actions",
        help_text="One or more; type in the search box to find them.",
        widget=forms.CheckboxSelectMultiple(attrs={"class": "action-choice"}),
    )
    resource = forms.CharField(
        label="Resource",
        required=False,
        max_length=MAX_RESOURCE,
        help_text="* for account-wide actions (the default), or an ARN of this account: "
        "arn:loopwright:<service>::<account>:<type>/<id>.",
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

    def clean_resource(self) -> str:
        text = self.cleaned_data["resource"].strip()
        if text in ("", "*"):
            return "*"
        try:
            arn = Arn.parse(text)
        except ArnError as exc:
            raise forms.ValidationError(
                f"not an ARN ({exc}); write * or arn:loopwright:<service>::<account>:<type>/<id>, "
                f"e.g. arn:loopwright:iam::{self.account}:role/LoopwrightSessionRole"
            ) from None
        if arn.account != self.account:
            raise forms.ValidationError(
                f"names account {arn.account}: only this account's resources ({self.account}) "
                "can be simulated; another account's are never found, whatever the policies say"
            )
        return text

    def __init__(self, *args, principals, account: str, **kwargs) -> None:
        self.account = account
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


def _fits(spec, resource: str) -> str | None:
    """A warning when ``resource`` is not of the type ``spec`` applies to."""
    if resource == "*" or spec.resource_type == "*":
        return None
    kind = resource.split(":", 5)[5].partition("/")[0]
    if kind != spec.resource_type:
        return f"{spec.name} applies to {spec.resource_type} ARNs; this resource is a {kind}"
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
        account=request.tenant.account_id,
        initial={"principal": request.GET.get("principal"), "resource": "*"},
    )
    result = None
    if asked and form.is_valid():
        data = form.cleaned_data
        who = _principal(request, data["principal"])
        resource = data["resource"]
        values = request_context(who) | data["context"]
        rows = []
        for action in data["action"]:
            decision = evaluate(who.policies(), AccessRequest(action, resource, who.arn, values))
            spec = ACTIONS[action]
            rows.append(
                {
                    "action": spec,
                    "decision": decision,
                    "statement": _statement(who, decision),
                    "arn_format": arn_format(request.tenant.account_id, spec.resource_type),
                    "warning": _fits(spec, resource),
                }
            )
        result = {
            "principal": who,
            "resource": resource,
            "rows": rows,
            "allowed": sum(1 for r in rows if r["decision"].allowed),
            "context": json.dumps(data["context"], indent=2) if data["context"] else "",
            "policies": [name for name, _ in who.policies()],
        }
    return render(
        request,
        "web/iam/simulator.html",
        {"form": form, "result": result, "catalogue": catalogue()},
        status=400 if asked and not form.is_valid() else 200,
    )
