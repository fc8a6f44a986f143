"""What every dashboard page's layout needs: the account switcher, the current section, and the
sections the principal may open (the others are left out of the navigation)."""

from __future__ import annotations

from django.http import HttpRequest

from controlplane.edge.callers import can

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


def dashboard(request: HttpRequest) -> dict:
    principal = getattr(request, "principal", None)
    return {
        "principal": principal,
        "tenant": getattr(principal, "tenant", None),
        "memberships": getattr(request, "memberships", []),
        "section": (request.resolver_match.url_name or "") if request.resolver_match else "",
        "nav": _open_sections(request) if principal is not None else {},
    }
