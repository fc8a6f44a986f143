"""Access key pairs (SigV4, for boto3 and sagemaker-train): list, create (the secret shown
once), revoke. Authorized as API keys are: a member manages their own, a role's keys need the
role's ARN and, to make one, the role's trust policy naming the caller."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.access_keys import selectors, services
from controlplane.access_keys.models import AccessKey
from controlplane.access_keys.sealing import access_key_arn
from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.iam.resources import user_arn

from .. import bodies
from ..parsing import body_of, text
from .iam_users import keys_of_owner, new_key_owner


def access_key_json(k: AccessKey) -> dict:
    return {
        "access_key_id": k.access_key_id,
        "name": k.name,
        "arn": access_key_arn(k.tenant.account_id, k.access_key_id),
        "principal": _owner_arn(k),
        "status": selectors.key_status(k),
        "created_at": k.created_at.isoformat(),
        "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None,
        "expires_at": k.expires_at.isoformat() if k.expires_at else None,
        "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
    }


def _owner_arn(k: AccessKey) -> str:
    return k.role.arn if k.role_id else user_arn(k.tenant, k.user.get_username())


@api_view(["GET", "POST"])
def access_keys(request: Request) -> Response:
    """The caller's access keys (or a role's with ``role_arn``); POST makes a pair, its
    ``secret_access_key`` shown once."""
    tenant = tenant_of(request)
    if request.method == "GET":
        found = keys_of_owner(request, selectors.access_keys(tenant=tenant), "iam:ListAccessKeys")
        return Response({"access_keys": [access_key_json(k) for k in found]})
    body = body_of(request, bodies.AccessKeyCreateBody)
    owner, expires = new_key_owner(request, body, "iam:CreateAccessKey")
    key, secret = services.access_key_create(
        tenant=tenant,
        actor=principal_of(request).arn,
        name=text(body, "name", 200),
        expires_in_days=expires,
        **owner,
    )
    return Response(access_key_json(key) | {"secret_access_key": secret}, status=201)


@api_view(["POST"])
def access_key_revoke(request: Request, access_key_id: str) -> Response:
    tenant = tenant_of(request)
    key = selectors.access_key_get(tenant=tenant, access_key_id=access_key_id)
    allow(
        request,
        "iam:RevokeAccessKey",
        access_key_arn(tenant.account_id, key.access_key_id),
        **{"iam:ApiKeyOwner": _owner_arn(key)},
    )
    key = services.access_key_revoke(key=key, actor=principal_of(request).arn)
    return Response(access_key_json(key))
