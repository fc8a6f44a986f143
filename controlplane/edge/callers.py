"""Who is calling and whether they may: the caller's IAM principal (an API face's is the DRF
request's user, found by ``controlplane.iam.authentication``; a dashboard page's is the logged-in user in
the account they picked) and ``allow``, which authorizes it and audits the decision."""

from __future__ import annotations

from django.http import HttpRequest

from controlplane.iam.access import authorize, check, decide
from controlplane.iam.principals import Principal, for_membership
from controlplane.tenants.models import Membership, Tenant

ACCOUNT_KEY = "loopwright_account"  # the login session's key holding the chosen account id


def memberships_of(user) -> list[Membership]:
    return list(
        Membership.objects.select_related("tenant", "user").filter(user=user).order_by("created_at")
    )


def login_principal(request: HttpRequest) -> Principal | None:
    """A dashboard user's principal in their chosen account (their first one by default); None
    when not logged in. Sets ``request.memberships`` for the account switcher."""
    if not request.user.is_authenticated:
        return None
    memberships = memberships_of(request.user)
    if not memberships:
        return None
    chosen = request.session.get(ACCOUNT_KEY)
    membership = next((m for m in memberships if m.tenant.account_id == chosen), memberships[0])
    request.memberships = memberships
    return for_membership(membership)


def on_page(request) -> bool:
    """Whether ``request`` is a dashboard page's: the page's login check set its principal."""
    return getattr(request, "principal", None) is not None


def principal_of(request) -> Principal:
    """The caller: a dashboard page's ``request.principal``, else an API face's authenticated
    user (a Principal)."""
    return request.principal if on_page(request) else request.user


def tenant_of(request) -> Tenant:
    return principal_of(request).tenant


def key_of(request) -> str:
    """The visible prefix of the key the caller signed in with (an access key pair's id);
    "" for a dashboard page's login. Operations and their usage record it."""
    key = principal_of(request).api_key
    return key.prefix if key is not None else ""


def is_fragment(request: HttpRequest) -> bool:
    """A request for a live region's part of a page (``X-Fragment: 1``)."""
    return request.headers.get("X-Fragment") == "1"


def is_refresh(request: HttpRequest) -> bool:
    """A live region's automatic reload of part of a page (a fragment GET)."""
    return request.method == "GET" and is_fragment(request)


def _audit_allowed(request) -> bool:
    """Every decision is recorded, except an allowed one for a dashboard page's automatic
    refresh (the page view that started it was recorded). The API faces record every one,
    whatever headers they are sent."""
    return not (on_page(request) and is_refresh(request))


def allow(request, action: str, resource: str = "*", **context) -> None:
    """Authorize the caller for ``action`` on ``resource``, audited; refused, ``AccessDenied``
    (403 naming the principal, the action and the resource), which each face renders."""
    authorize(
        principal_of(request),
        action,
        resource,
        request=request,
        context=context or None,
        audit_allowed=_audit_allowed(request),
    )


def may(request, action: str, resource: str = "*", **context) -> bool:
    """Whether the caller may (audited, like ``allow``): for parts of a page that a principal
    without the permission simply does not see."""
    decision = check(
        principal_of(request),
        action,
        resource,
        request=request,
        context=context or None,
        audit_allowed=_audit_allowed(request),
    )
    return decision.allowed


def can(request, action: str, resource: str = "*", **context) -> bool:
    """Whether the caller would be allowed ``action``: for showing or disabling a button. Not
    audited (nothing is done or read; the action itself is audited when taken)."""
    decision, _ = decide(
        principal_of(request), action, resource, request=request, context=context or None
    )
    return decision.allowed
