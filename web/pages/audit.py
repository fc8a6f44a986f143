"""The audit log of the account, newest first: every authorization decision and operator change
with what became of it, changes only unless reads are asked for, filtered by action and resource
(any part of them), principal, decision, outcome and date range, from the same selector and IAM
action as the API's ``audit/events`` (``audit:LookupEvents``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from controlplane.audit.selectors import audit_events
from controlplane.edge.callers import allow
from controlplane.iam.actions import ACTIONS

from ..formkit import Form
from ..login_required import page

PER_PAGE = 50
SUGGEST_FROM = 1000  # latest events whose principals and actions the filters suggest
DECISIONS = {"allow": True, "deny": False}


OUTCOMES = {"succeeded": "succeeded", "failed": "failed"}


class FilterForm(Form):
    action = forms.CharField(
        label="Action contains",
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"list": "actions", "placeholder": "e.g. ApiKey"}),
    )
    principal = forms.CharField(
        required=False, max_length=400, widget=forms.TextInput(attrs={"list": "principals"})
    )
    decision = forms.ChoiceField(
        required=False, choices=[("", "Any"), ("allow", "Allowed"), ("deny", "Denied")]
    )
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "Any"), ("succeeded", "Succeeded"), ("failed", "Failed")],
    )
    reads = forms.BooleanField(
        label="Include reads",
        required=False,
        help_text="Page views and other reads; by default only changes are listed.",
    )
    since = forms.DateField(
        label="From", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        label="To", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    resource = forms.CharField(label="Resource contains", required=False, max_length=1000)
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean(self) -> dict:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            self.add_error("until", "must not be before From")
        return data


def short(arn: str) -> str:
    """``role/Deployer`` for ``arn:loopwright:iam::<account>:role/Deployer``: the account is
    always this one, so the resource part says it all (anything else is shown as it is)."""
    parts = arn.split(":", 5)
    return parts[5] if len(parts) == 6 and parts[0] == "arn" and parts[5] else arn


_ARN_HEAD = re.compile(r"arn:loopwright:[a-z0-9-]*::(\d{12}):")


def short_text(text: str, account: str) -> str:
    """``text`` with this account's ARNs written as their resource part (as the columns are)."""
    return _ARN_HEAD.sub(lambda m: "" if m.group(1) == account else m.group(0), text)


def _midnight(day) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _suggestions(request: HttpRequest) -> tuple[list[str], list[str]]:
    """Actions and principals to suggest in the filters: the catalogue's actions and whatever
    the latest events name (no other read, so looking at the log adds nothing to it)."""
    recent = audit_events(tenant=request.tenant)[:SUGGEST_FROM].values_list("action", "principal")
    actions, principals = set(ACTIONS), set()
    for action, principal in recent:
        actions.add(action)
        principals.add(principal)
    return sorted(actions), sorted(principals)


@page
@require_GET
def events(request: HttpRequest) -> HttpResponse:
    allow(request, "audit:LookupEvents")
    form = FilterForm(request.GET or None)
    actions, principals = _suggestions(request)
    found, more, filters = [], False, {}
    if not form.is_bound or form.is_valid():
        f = form.cleaned_data if form.is_bound else {}
        since, until = f.get("since"), f.get("until")
        query = audit_events(
            tenant=request.tenant,
            action_contains=(f.get("action") or "").strip() or None,
            principal=(f.get("principal") or "").strip() or None,
            allowed=DECISIONS.get(f.get("decision") or ""),
            since=_midnight(since) if since else None,
            until=_midnight(until + timedelta(days=1)) if until else None,
            before_id=f.get("before"),
            resource_contains=(f.get("resource") or "").strip() or None,
            changes_only=not f.get("reads"),
            outcome=OUTCOMES.get(f.get("outcome") or ""),
        )
        found = list(query[: PER_PAGE + 1])
        more = len(found) > PER_PAGE
        found = found[:PER_PAGE]
        for e in found:  # this account's ARNs, shortened as the columns are
            e.error_text = short_text(e.error, request.tenant.account_id)
        filters = {k: v for k, v in request.GET.items() if k != "before" and v}
    return render(
        request,
        "web/audit/events.html",
        {
            "form": form,
            "events": [(e, short(e.principal), short(e.resource)) for e in found],
            "older": f"?{urlencode(filters | {'before': found[-1].id})}" if more else None,
            "newest": f"?{urlencode(filters)}"
            if form.is_bound and form["before"].value()
            else None,
            "filtered": any(v for k, v in filters.items()),
            "reads": bool(form.is_bound and form.is_valid() and form.cleaned_data.get("reads")),
            "actions": actions,
            "principals": principals,
        },
        status=400 if form.is_bound and not form.is_valid() else 200,
    )


urlpatterns = [path("audit", events, name="audit")]
