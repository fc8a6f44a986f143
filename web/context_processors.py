"""What every dashboard page's layout needs: the account switcher and the current section."""

from __future__ import annotations

from django.http import HttpRequest


def dashboard(request: HttpRequest) -> dict:
    principal = getattr(request, "principal", None)
    return {
        "principal": principal,
        "tenant": getattr(principal, "tenant", None),
        "memberships": getattr(request, "memberships", []),
        "section": (request.resolver_match.url_name or "") if request.resolver_match else "",
    }
