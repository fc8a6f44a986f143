"""Members of the account (users), their invitations and inline policies, and API keys."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.errors import DomainError, NotFound
from controlplane.iam import selectors as iam_selectors
from controlplane.iam import services as iam_services
from controlplane.iam.models import ApiKey
from controlplane.iam.resources import api_key_arn, user_arn
from controlplane.tenants import selectors, services
from controlplane.tenants.models import Membership

from .. import bodies
from ..parsing import body_of, text


def user_json(m: Membership) -> dict:
    return {
        "user": m.user.get_username(),
        "arn": user_arn(m.tenant, m.user.get_username()),
        "role": m.role,
        "joined_at": m.created_at.isoformat(),
        "policy_names": sorted(p.name for p in m.policies.all()),
    }


def key_json(k: ApiKey) -> dict:
    return {
        "prefix": k.prefix,
        "name": k.name,
        "arn": api_key_arn(k.tenant, k.prefix),
        "principal": k.role.arn if k.role_id else user_arn(k.tenant, k.user.get_username()),
        "created_at": k.created_at.isoformat(),
        "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None,
        "expires_at": k.expires_at.isoformat() if k.expires_at else None,
        "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
    }


@api_view(["GET", "POST"])
def users(request: Request) -> Response:
    """List members, or invite one (the invitation token is shown once)."""
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "iam:ListUsers")
        return Response({"users": [user_json(m) for m in selectors.memberships(tenant=tenant)]})
    body = body_of(request, bodies.UserInviteBody)
    email = text(body, "email", 254).strip().lower()
    allow(request, "iam:CreateUser", user_arn(tenant, email))
    caller = principal_of(request)
    invitation, token = services.invitation_create(
        tenant=tenant,
        email=email,
        role=text(body, "role", 20),
        actor=caller.arn,
        acting_membership=caller.membership,
    )
    return Response(
        {
            "email": invitation.email,
            "role": invitation.role,
            "token": token,
            "expires_at": invitation.expires_at.isoformat(),
        },
        status=201,
    )


@api_view(["GET", "PATCH", "DELETE"])
def user(request: Request, username: str) -> Response:
    tenant = tenant_of(request)
    arn = user_arn(tenant, username.lower())
    if request.method == "GET":
        allow(request, "iam:GetUser", arn)
        return Response(user_json(selectors.membership_get(tenant=tenant, username=username)))
    if request.method == "DELETE":
        allow(request, "iam:DeleteUser", arn)
        services.membership_remove(
            membership=selectors.membership_get(tenant=tenant, username=username),
            acting_membership=principal_of(request).membership,
        )
        return Response(status=204)
    allow(request, "iam:UpdateUser", arn)
    body = body_of(request, bodies.MembershipBody)
    membership = services.membership_set_role(
        membership=selectors.membership_get(tenant=tenant, username=username),
        role=text(body, "role", 20),
        acting_membership=principal_of(request).membership,
    )
    return Response(user_json(membership))


@api_view(["GET", "PUT", "DELETE"])
def user_policy(request: Request, username: str, policy_name: str) -> Response:
    tenant = tenant_of(request)
    arn = user_arn(tenant, username.lower())
    if request.method == "GET":
        allow(request, "iam:GetUserPolicy", arn)
        membership = selectors.membership_get(tenant=tenant, username=username)
        policy = membership.policies.filter(name=policy_name).first()
        if policy is None:
            raise NotFound(f"policy_name: no policy {policy_name!r}", field="policy_name")
        return Response({"user": username, "policy_name": policy.name, "document": policy.document})
    membership = selectors.membership_get(tenant=tenant, username=username)
    if request.method == "DELETE":
        allow(request, "iam:DeleteUserPolicy", arn)
        iam_services.user_policy_delete(membership=membership, name=policy_name)
        return Response(status=204)
    allow(request, "iam:PutUserPolicy", arn)
    body = body_of(request, bodies.PolicyBody)
    policy = iam_services.user_policy_put(
        membership=membership, name=policy_name, document=body.get("document")
    )
    return Response({"user": username, "policy_name": policy.name, "document": policy.document})


@api_view(["GET", "POST"])
def api_keys(request: Request) -> Response:
    """The caller's keys (or a role's with ``role_arn``); POST makes one, shown once."""
    tenant = tenant_of(request)
    if request.method == "GET":
        found = keys_of_owner(request, iam_selectors.api_keys(tenant=tenant), "iam:ListApiKeys")
        return Response({"api_keys": [key_json(k) for k in found]})
    body = body_of(request, bodies.ApiKeyCreateBody)
    owner, expires = new_key_owner(request, body, "iam:CreateApiKey")
    key, raw = iam_services.api_key_create(
        tenant=tenant, name=text(body, "name", 200), expires_in_days=expires, **owner
    )
    return Response(key_json(key) | {"api_key": raw}, status=201)


def keys_of_owner(request: Request, keys, action: str):
    """``keys`` narrowed to the caller's own, or (``?role_arn=``) a role's, once ``action`` is
    allowed on that owner."""
    role_arn = request.query_params.get("role_arn")
    owner = _key_owner(request, role_arn, action)
    return keys.filter(role=owner) if role_arn else keys.filter(user=owner)


def new_key_owner(request: Request, body: dict, action: str) -> tuple[dict, int | None]:
    """Who a new key (an API key, an access key pair) acts as (``{"user": …}`` or ``{"role":
    …}``) and its ``expires_in_days``, once ``action`` is allowed and, for a role, its trust
    policy names the caller."""
    expires = body.get("expires_in_days")
    if expires is not None and (not isinstance(expires, int) or isinstance(expires, bool)):
        raise DomainError("expires_in_days: must be an integer", field="expires_in_days")
    role_arn = body.get("role_arn")
    owner = _key_owner(request, role_arn, action)
    if role_arn:
        # using a role's key is assuming the role: its trust policy must name the caller
        iam_services.trust_required(owner, principal_of(request).arn)
        return {"role": owner}, expires
    return {"user": owner}, expires


def _key_owner(request: Request, role_arn, action: str):
    caller = principal_of(request)
    if role_arn:
        if not isinstance(role_arn, str):
            raise DomainError("role_arn: must be a string", field="role_arn")
        role = iam_selectors.role_by_arn(tenant=caller.tenant, arn=role_arn)
        allow(request, action, role.arn)
        return role
    if caller.user is None:
        raise DomainError(
            "role_arn is required: a role's key manages keys for a role", field="role_arn"
        )
    allow(request, action, caller.arn)
    return caller.user


@api_view(["POST"])
def api_key_revoke(request: Request, prefix: str) -> Response:
    tenant = tenant_of(request)
    key = iam_selectors.api_key_get(tenant=tenant, prefix=prefix)
    owner = key_json(key)["principal"]
    allow(request, "iam:RevokeApiKey", api_key_arn(tenant, prefix), **{"iam:ApiKeyOwner": owner})
    return Response(key_json(iam_services.api_key_revoke(key=key)))
