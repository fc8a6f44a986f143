"""Who is looking at a page: a logged-in user, in the account they picked (their first one by
default), as the same IAM principal the API uses. ``page`` wraps every dashboard view."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.audit.outcomes import note_failure
from controlplane.errors import AccessDenied, DomainError
from controlplane.iam.access import authorize, check, decide
from controlplane.iam.actions import ACTIONS
from controlplane.iam.principals import Principal, for_membership
from controlplane.tenants.models import Membership

ACCOUNT_KEY = "loopwright_account"  # the session key holding the chosen account id


def memberships_of(user) -> list[Membership]:
    return list(
        Membership.objects.select_related("tenant", "user").filter(user=user).order_by("created_at")
    )


def principal_for(request: HttpRequest) -> Principal | None:
    """The logged-in user's principal in their chosen account; None when not logged in."""
    if not request.user.is_authenticated:
        return None
    memberships = memberships_of(request.user)
    if not memberships:
        return None
    chosen = request.session.get(ACCOUNT_KEY)
    membership = next((m for m in memberships if m.tenant.account_id == chosen), memberships[0])
    request.memberships = memberships
    return for_membership(membership)


def is_fragment(request: HttpRequest) -> bool:
    """A request for a live region's part of a page (``X-Fragment: 1``)."""
    return request.headers.get("X-Fragment") == "1"


def is_refresh(request: HttpRequest) -> bool:
    """A live region's automatic reload of part of a page (a fragment GET)."""
    return request.method == "GET" and is_fragment(request)


def allow(request: HttpRequest, action: str, resource: str = "*", **context) -> None:
    """Authorize the page's principal (audited; an automatic refresh only when refused: the
    page view that started it was recorded); AccessDenied renders as a 403 page."""
    authorize(
        request.principal,
        action,
        resource,
        request=request,
        context=context or None,
        audit_allowed=not is_refresh(request),
    )


def may(request: HttpRequest, action: str, resource: str = "*", **context) -> bool:
    """Whether the page's principal may (audited, like ``allow``): for parts of a page that a
    principal without the permission simply does not see."""
    decision = check(
        request.principal,
        action,
        resource,
        request=request,
        context=context or None,
        audit_allowed=not is_refresh(request),
    )
    return decision.allowed


def can(request: HttpRequest, action: str, resource: str = "*", **context) -> bool:
    """Whether the page's principal would be allowed ``action``: for showing or disabling a
    button. Not audited (nothing is done or read; the action itself is audited when taken)."""
    decision, _ = decide(
        request.principal, action, resource, request=request, context=context or None
    )
    return decision.allowed


_REFUSED = re.compile(r"not authorized to perform (\S+) on (\S+?):")


def refusal(request: HttpRequest, error: DomainError) -> dict:
    """A 403 in words: what the person tried (the action's description), as whom, and who can
    help; the policy evaluator's own reason is kept for those who want it."""
    found = _REFUSED.search(error.detail) if isinstance(error, AccessDenied) else None
    if found is None:
        return {}
    action = found.group(1)
    spec = ACTIONS.get(action)
    return {
        "denied_action": action,
        "denied_what": spec.description if spec else action,
        "denied_resource": found.group(2),
        "membership": getattr(request.principal, "membership", None),
    }


def page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A dashboard page: login required; ``request.principal`` and ``request.tenant`` set; a
    DomainError renders as a page with its status (another tenant's thing is a plain 404)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        principal = principal_for(request)
        if principal is None:
            return redirect(f"/login?next={request.get_full_path()}")
        request.principal = principal
        request.tenant = principal.tenant
        try:
            return view(request, *args, **kwargs)
        except DomainError as e:
            note_failure(e.detail)
            return render(
                request,
                "web/errors/problem.html",
                {"status": e.status, "detail": e.detail, "code": e.code} | refusal(request, e),
                status=e.status,
            )

    return wrapped
