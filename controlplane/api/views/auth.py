"""Sign-up, password login for the dashboard, invitations and who-am-i."""

from __future__ import annotations

from django.contrib.auth import login, logout
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import principal_of
from controlplane.iam.access import client_ip
from controlplane.iam.principals import for_membership
from controlplane.iam.provisioning import account_create
from controlplane.tenants import logins
from controlplane.tenants import services as tenants
from controlplane.tenants.models import Membership

from .. import bodies
from ..parsing import body_of, text


def membership_json(m: Membership) -> dict:
    return {
        "account_id": m.tenant.account_id,
        "tenant_name": m.tenant.name,
        "user": m.user.get_username(),
        "role": m.role,
        "user_arn": for_membership(m).arn,
    }


@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def signup(request: Request) -> Response:
    """A new tenant, its owner, its session role and a first API key (shown once)."""
    body = body_of(request, bodies.SignupBody)
    fields = {
        "email": text(body, "email", 254),
        "password": text(body, "password", 128),
        "tenant_name": text(body, "tenant_name", 200),
    }
    # counted before anything is looked up: a taken email answers 409 only within the limit
    logins.signup_check(source_ip=client_ip(request))
    account = account_create(**fields)
    login(request._request, account.membership.user)
    return Response(
        membership_json(account.membership)
        | {"api_key": account.api_key, "session_role_arn": account.session_role.arn},
        status=201,
    )


@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def login_view(request: Request) -> Response:
    body = body_of(request, bodies.LoginBody)
    user = logins.login_check(
        email=text(body, "email", 254),
        password=text(body, "password", 128),
        source_ip=client_ip(request),
    )
    login(request._request, user)
    memberships = Membership.objects.select_related("tenant", "user").filter(user=user)
    return Response({"accounts": [membership_json(m) for m in memberships]})


@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def logout_view(request: Request) -> Response:
    logout(request._request)
    return Response({"logged_out": True})


@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def accept_invitation(request: Request) -> Response:
    body = body_of(request, bodies.InvitationAcceptBody)
    membership = tenants.invitation_accept(
        token=text(body, "token", 200), password=text(body, "password", 128)
    )
    login(request._request, membership.user)
    return Response(membership_json(membership), status=201)


@api_view(["GET"])
def whoami(request: Request) -> Response:
    principal = principal_of(request)
    return Response(
        {
            "arn": principal.arn,
            "account_id": principal.tenant.account_id,
            "tenant_name": principal.tenant.name,
            "kind": "role" if principal.is_role else "user",
            "membership_role": principal.membership.role if principal.membership else None,
            "api_key": principal.api_key.prefix if principal.api_key else None,
        }
    )
