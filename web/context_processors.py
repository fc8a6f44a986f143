"""What every dashboard page's layout needs: the account switcher, the current section, the
sections the principal may open (the others are left out of the navigation), and the banner of
the account's budgets that passed a threshold this period (for whoever may read budgets)."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils import timezone

from controlplane.budgets.selectors import banners
from controlplane.budgets.wording import this_period
from controlplane.edge.callers import can

from .values import tokens, usd

# section → (where its link goes, the action that opens it); IAM opens on the keys page for
# whoever may not list roles
SECTIONS = {
    "overview": ("/overview", "sessions:ListTrainingSessions"),
    "sessions": ("/sessions", "sessions:ListTrainingSessions"),
    "registry": ("/registry", "registry:ListModelPackageGroups"),
    "iam": ("/iam/roles", "iam:ListRoles"),
    "kms": ("/kms", "kms:ListKeys"),
    "vpc": ("/vpc", "vpc:ListSubnets"),
    "billing": ("/billing", "billing:GetUsageReport"),
    "audit": ("/audit", "audit:LookupEvents"),
}


def _open_sections(request: HttpRequest) -> dict[str, str]:
    principal = request.principal
    out = {name: href for name, (href, action) in SECTIONS.items() if can(request, action)}
    own_keys = principal.membership is not None and can(request, "iam:ListApiKeys", principal.arn)
    if "iam" not in out and own_keys:
        out["iam"] = "/iam/keys"
    return out


def amount_words(value, unit: str) -> str:
    """A budget's amount as the dashboard writes money and tokens."""
    if unit == "usd":
        return usd(value)
    return f"{tokens(value)} tokens"


def budget_banners(request: HttpRequest) -> list[dict]:
    """One line per budget that passed a threshold in its current period, the fullest first."""
    if not can(request, "billing:ListBudgets"):
        return []
    shown = []
    for banner in banners(tenant=request.principal.tenant, now=timezone.now()):
        budget, alert = banner.budget, banner.alert
        reached = alert.threshold >= 100
        what = "has reached" if reached else f"has passed {alert.threshold}% of"
        refused = (
            " Training and sampling requests it covers are refused."
            if (reached and budget.hard)
            else ""
        )
        shown.append(
            {
                "name": budget.name,
                "level": "stop" if reached else "warn",
                "text": f"Budget {budget.name} {what} its limit of "
                f"{amount_words(alert.amount, budget.unit)} {this_period(budget)}.{refused}",
            }
        )
    return shown


def dashboard(request: HttpRequest) -> dict:
    principal = getattr(request, "principal", None)
    return {
        "principal": principal,
        "tenant": getattr(principal, "tenant", None),
        "memberships": getattr(request, "memberships", []),
        "section": (request.resolver_match.url_name or "") if request.resolver_match else "",
        "nav": _open_sections(request) if principal is not None else {},
        "budget_banners": budget_banners(request) if principal is not None else [],
    }
