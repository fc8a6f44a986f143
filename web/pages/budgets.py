"""Budgets: the account's spend caps with their period's spend, a form that makes one, and each
budget's page (settings, alerts, deliveries, changes, deletion), through the budgets services and
IAM actions; a new webhook secret is shown once, by the page the form redirects to."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.budgets import selectors, services
from controlplane.budgets.answers import budget_json
from controlplane.budgets.models import Budget
from controlplane.budgets.wording import per_period
from controlplane.edge.callers import allow
from controlplane.errors import NotFound
from controlplane.iam.resources import budget_arn

from .. import shown_once
from ..formkit import Form, submit
from ..login_required import page
from ..values import tokens, usd

SHOWN_ONCE = "budget-webhook"  # the kind of what the page after a POST shows once


def _thresholds(raw: str) -> list[int]:
    try:
        return [int(p) for p in raw.replace(" ", "").split(",") if p]
    except ValueError:
        raise forms.ValidationError(
            "whole percents separated by commas, e.g. 50, 80, 100"
        ) from None


class BudgetForm(Form):
    name = forms.CharField(max_length=64, help_text="Letters, digits, '.', '_' or '-'.")
    scope = forms.ChoiceField(
        choices=Budget.Scope.choices,
        help_text="What it counts: the whole account, one key's requests, one session, or every "
        "session with a tag.",
    )
    scope_value = forms.CharField(
        label="Key, session or tag",
        required=False,
        max_length=256,
        help_text="An API key's prefix (tml-…) or access key id (LWAK…), a session id, or a tag "
        "(a label such as project:search, or key=value of the sessions' metadata).",
    )
    unit = forms.ChoiceField(choices=Budget.Unit.choices, help_text="Tokens, or US dollars.")
    period = forms.ChoiceField(choices=Budget.Period.choices, initial="month")
    amount = forms.CharField(max_length=40, help_text="The limit in its unit.")
    thresholds = forms.CharField(
        initial="50, 80, 100", max_length=60, help_text="Percents that alert, once a period each."
    )
    hard = forms.BooleanField(
        label="Refuse requests once the limit is reached",
        required=False,
        initial=True,
        help_text="Training and sampling requests it covers are refused with a 402; other "
        "requests go on.",
    )
    webhook_url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=2048,
        help_text="Optional: alerts are POSTed here, signed with a secret shown once.",
    )

    def clean_thresholds(self) -> list[int]:
        return _thresholds(self.cleaned_data["thresholds"])


class ChangeForm(Form):
    id_prefix = "change"
    amount = forms.CharField(max_length=40)
    period = forms.ChoiceField(choices=Budget.Period.choices)
    thresholds = forms.CharField(max_length=60)
    hard = forms.BooleanField(label="Refuse requests once the limit is reached", required=False)
    webhook_url = forms.CharField(label="Webhook URL", required=False, max_length=2048)
    rotate_webhook_secret = forms.BooleanField(label="Make a new webhook secret", required=False)

    def clean_thresholds(self) -> list[int]:
        return _thresholds(self.cleaned_data["thresholds"])


def amount_text(value: str | None, unit: str) -> str:
    if value is None:
        return "unlimited"
    return usd(value) if unit == Budget.Unit.USD else f"{tokens(int(Decimal(value)))} tokens"


def plain(value: str | None) -> str:
    """An amount as a form shows it: 12.5, not 12.500000."""
    if value is None:
        return ""
    return format(Decimal(value).normalize(), "f")


def _shown(budget: Budget, now) -> dict:
    """A budget as the pages show it: its JSON, and its amounts in words."""
    shown = budget_json(budget, now=now)
    current, unit = shown["current_period"], shown["unit"]
    percent = current["percent"]
    return shown | {
        "amount_text": amount_text(shown["amount"], unit),
        "spent_text": amount_text(current["spent"], unit),
        "held_text": amount_text(current["held"], unit),
        "remaining_text": amount_text(current["remaining"], unit),
        "alerts_shown": [
            a | {"spent_text": amount_text(a["spent"], unit), "at": a["fired_at"][:16]}
            for a in shown["alerts"]
        ],
        "per_period": per_period(budget),
        "bar": min(percent if percent is not None else 100.0, 100.0),
        "level": "stop" if current["exhausted"] else "warn" if (percent or 0) >= 80 else "ok",
    }


@page
@require_http_methods(["GET", "POST"])
def budget_list(request: HttpRequest) -> HttpResponse:
    form = BudgetForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        name = request.POST.get("name", "")
        allow(request, "billing:CreateBudget", budget_arn(request.tenant, name or "*"))
        made = submit(
            form,
            lambda d: services.budget_create(
                tenant=request.tenant,
                actor=request.principal.arn,
                name=d["name"],
                scope=d["scope"],
                scope_value=d["scope_value"] or None,
                unit=d["unit"],
                period=d["period"],
                amount=d["amount"],
                thresholds=d["thresholds"],
                hard=d["hard"],
                webhook_url=d["webhook_url"] or None,
            ),
        )
        if made is not None:
            if made.webhook_secret:
                shown_once.keep(
                    request, SHOWN_ONCE, made.budget.name, {"secret": made.webhook_secret}
                )
            messages.success(request, f"Budget {made.budget.name} created.")
            return redirect(f"/billing/budgets/{made.budget.name}")
    allow(request, "billing:ListBudgets")
    now = timezone.now()
    shown = [_shown(b, now) for b in selectors.budget_list(tenant=request.tenant)]
    return render(
        request,
        "web/billing/budgets.html",
        {"budgets": shown, "form": form},
        status=400 if form.is_bound else 200,
    )


def _budget(request: HttpRequest, name: str, action: str) -> Budget:
    if not services.NAME.fullmatch(name):
        raise NotFound(f"budget {name[:100]!r} not found", field="name")
    allow(request, action, budget_arn(request.tenant, name))
    return selectors.budget_get(tenant=request.tenant, name=name)


@page
@require_http_methods(["GET", "POST"])
def budget_detail(request: HttpRequest, name: str) -> HttpResponse:
    if request.method == "POST":
        budget = _budget(request, name, "billing:UpdateBudget")
        form = ChangeForm(request.POST)
        made = submit(
            form,
            lambda d: services.budget_update(
                tenant=request.tenant,
                actor=request.principal.arn,
                name=name,
                changes={k: v for k, v in d.items() if k != "webhook_url"}
                | {"webhook_url": d["webhook_url"] or None},
            ),
        )
        if made is not None:
            if made.webhook_secret:
                shown_once.keep(request, SHOWN_ONCE, name, {"secret": made.webhook_secret})
            messages.success(request, f"Budget {name} changed.")
            return redirect(f"/billing/budgets/{name}")
        return _detail(request, budget, form, status=400)
    budget = _budget(request, name, "billing:DescribeBudget")
    return _detail(request, budget, None)


def _detail(request: HttpRequest, budget: Budget, form: ChangeForm | None, *, status: int = 200):
    now = timezone.now()
    shown = _shown(budget, now)
    if form is None:
        form = ChangeForm(
            initial={
                "amount": plain(shown["amount"]),
                "period": budget.period,
                "thresholds": ", ".join(str(t) for t in budget.thresholds),
                "hard": budget.hard,
                "webhook_url": budget.webhook_url,
            }
        )
    deliveries = budget.deliveries.select_related("alert").order_by("-created_at")[:20]
    return render(
        request,
        "web/billing/budget.html",
        {
            "budget": shown,
            "form": form,
            "operator": budget.managed_by == Budget.ManagedBy.OPERATOR,
            "deliveries": deliveries,
            "secret": shown_once.take(request, SHOWN_ONCE, budget.name),
        },
        status=status,
    )


@page
@require_POST
def budget_delete(request: HttpRequest, name: str) -> HttpResponse:
    _budget(request, name, "billing:DeleteBudget")
    services.budget_delete(tenant=request.tenant, actor=request.principal.arn, name=name)
    messages.success(request, f"Budget {name} deleted.")
    return redirect("/billing/budgets")


urlpatterns = [
    path("billing/budgets", budget_list, name="billing_budgets"),
    path("billing/budgets/<str:name>", budget_detail, name="billing_budget"),
    path("billing/budgets/<str:name>/delete", budget_delete, name="billing_budget_delete"),
]
