"""KMS keys of the tenant: create, list, describe, enable/disable, schedule or cancel deletion,
rotate. A key is named by its id, its ARN (URL-encoded) or its alias; no response holds material."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, tenant_of
from controlplane.errors import DomainError
from controlplane.kms import services
from controlplane.kms.models import KmsKey

from .. import bodies
from ..parsing import body_of, text


def key_json(key: KmsKey) -> dict:
    local = key.provider == KmsKey.Provider.LOCAL
    return {
        "key_id": str(key.id),
        "arn": key.arn,
        "alias": key.alias,
        "description": key.description,
        "provider": key.provider,
        "aws_key_id": key.aws_key_id or None,
        "state": key.state,
        "current_version": key.current_version if local else None,
        "deletion_date": key.deletion_date.isoformat() if key.deletion_date else None,
        "is_default": key.is_default,
        "created_at": key.created_at.isoformat(),
        "updated_at": key.updated_at.isoformat(),
        "rotated_at": key.rotated_at.isoformat() if key.rotated_at else None,
    }


def _actor(request: Request) -> str:
    return getattr(request.user, "arn", None) or str(request.user)


def _allow_on_key(request: Request, action: str, key_id: str) -> KmsKey:
    """Authorize ``action`` on the key's ARN (the URL may name it by id, ARN or alias)."""
    key = services.key_resolve(tenant=tenant_of(request), ref=key_id)
    allow(request, action, key.arn)
    return key


def _state_change(request: Request, key_id: str, action: str, change) -> Response:
    """A body-less change of one key's state (``change`` is the service doing it)."""
    _allow_on_key(request, action, key_id)
    body_of(request, bodies.EmptyBody)
    return Response(
        key_json(change(tenant=tenant_of(request), actor=_actor(request), key_id=key_id))
    )


def _optional_text(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise DomainError(f"{name}: must be a string", field=name)
    return value


@api_view(["GET", "POST"])
def keys(request: Request) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "kms:ListKeys")
        found = services.key_list(tenant=tenant, actor=_actor(request))
        return Response({"keys": [key_json(k) for k in found]})
    allow(request, "kms:CreateKey")
    body = body_of(request, bodies.KeyCreateBody)
    key = services.key_create(
        tenant=tenant,
        actor=_actor(request),
        description=text(body, "description", services.MAX_DESCRIPTION, required=False),
        alias=_optional_text(body, "alias"),
        provider=text(body, "provider", 16, required=False, default="local"),
        aws_key_id=_optional_text(body, "aws_key_id"),
    )
    return Response(key_json(key), status=201)


@api_view(["GET"])
def key(request: Request, key_id: str) -> Response:
    return Response(key_json(_allow_on_key(request, "kms:DescribeKey", key_id)))


@api_view(["POST"])
def key_disable(request: Request, key_id: str) -> Response:
    return _state_change(request, key_id, "kms:DisableKey", services.key_disable)


@api_view(["POST"])
def key_enable(request: Request, key_id: str) -> Response:
    return _state_change(request, key_id, "kms:EnableKey", services.key_enable)


@api_view(["POST"])
def key_schedule_deletion(request: Request, key_id: str) -> Response:
    _allow_on_key(request, "kms:ScheduleKeyDeletion", key_id)
    body = body_of(request, bodies.ScheduleDeletionBody)
    found = services.key_schedule_deletion(
        tenant=tenant_of(request),
        actor=_actor(request),
        key_id=key_id,
        pending_window_days=body.get("pending_window_days", services.DEFAULT_WINDOW_DAYS),
    )
    return Response(key_json(found))


@api_view(["POST"])
def key_cancel_deletion(request: Request, key_id: str) -> Response:
    return _state_change(request, key_id, "kms:CancelKeyDeletion", services.key_cancel_deletion)


@api_view(["POST"])
def key_rotate(request: Request, key_id: str) -> Response:
    return _state_change(request, key_id, "kms:RotateKey", services.key_rotate)
