"""The policy editor of the IAM pages: an inline policy of a role or a member, or a role's trust
policy, in a JSON editor with line numbers that marks the line an error names, beside the
catalogue of actions; saved only once the API's parser accepts the document."""

from __future__ import annotations

import json
from collections.abc import Callable

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.iam.models import RolePolicy, UserPolicy

from .formkit import Form, code_area, submit
from .iam_simulator import catalogue
from .json_lines import error_line

EXAMPLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "ReadRegistry",
            "Effect": "Allow",
            "Action": ["registry:Describe*", "registry:List*"],
            "Resource": "*",
        }
    ],
}


def pretty(document: dict) -> str:
    return json.dumps(document, indent=2)


class PolicyForm(Form):
    policy_name = forms.CharField(
        label="Policy name", max_length=200, help_text="1–128 letters, digits or +=,.@_-"
    )
    document = forms.CharField(
        label="Policy document (JSON)",
        widget=code_area(18),
        strip=False,
        help_text="IAM JSON: Version, Statement with Effect, Action and Resource. Errors name "
        "the element, e.g. Statement[0].Action[1].",
    )


class TrustForm(Form):
    trust_policy = forms.CharField(label="Trust policy (JSON)", widget=code_area(16), strip=False)


def editor_action(request: HttpRequest, owner: str, policy_name: str | None) -> str:
    """Saving is ``iam:Put<owner>Policy``; showing a policy ``iam:Get<owner>Policy``, and the
    empty editor for a new one ``iam:Get<owner>`` (it shows the owner only)."""
    if request.method == "POST":
        return f"iam:Put{owner}Policy"
    return f"iam:Get{owner}Policy" if policy_name else f"iam:Get{owner}"


def policy_page(
    request: HttpRequest,
    existing: RolePolicy | UserPolicy | None,
    put: Callable[[dict], RolePolicy | UserPolicy],
    *,
    owner_kind: str,
    owner: str,
    owner_arn: str,
    back: str,
    base: str,
) -> HttpResponse:
    if request.method == "POST":
        data = request.POST.copy()
        if existing is not None:
            data["policy_name"] = existing.name  # the name of an existing policy stays
        form = PolicyForm(data)
        if existing is not None:
            form.fields["policy_name"].disabled = True
            form.fields["policy_name"].initial = existing.name
        saved = submit(form, put)
        if saved is not None:
            messages.success(request, f"Policy {saved.name} of {owner} saved.")
            return redirect(back)
    elif existing is not None:
        form = PolicyForm(
            initial={"policy_name": existing.name, "document": pretty(existing.document)}
        )
        form.fields["policy_name"].disabled = True
    else:
        form = PolicyForm(initial={"document": pretty(EXAMPLE_POLICY)})
    name = existing.name if existing is not None else None
    return editor(
        request,
        form,
        owner_kind=owner_kind,
        owner=owner,
        owner_arn=owner_arn,
        back=back,
        title=f"Policy {name} of {owner}" if name else f"New inline policy for {owner}",
        action=f"{base}/{name}" if name else f"{base}/new",
    )


def editor(
    request: HttpRequest,
    form: Form,
    *,
    owner_kind: str,
    owner: str,
    owner_arn: str,
    back: str,
    title: str,
    action: str,
    trust: bool = False,
    templates: list[tuple[str, str]] | None = None,
) -> HttpResponse:
    code = form["trust_policy" if trust else "document"]
    text = code.value() or ""
    marked = error_line(text, form.error_paths.get(code.name, "")) if code.errors else None
    return render(
        request,
        "web/iam/policy_editor.html",
        {
            "form": form,
            "code": code,
            "others": [f for f in form.visible_fields() if f.name != code.name],
            "lines": range(1, text.count("\n") + 2),
            "marked": marked,
            "owner_kind": owner_kind,
            "owner": owner,
            "owner_arn": owner_arn,
            "back": back,
            "title": title,
            "action": action,
            "trust": trust,
            "templates": templates or [],
            "catalogue": catalogue(),
        },
        status=400 if form.is_bound else 200,
    )
