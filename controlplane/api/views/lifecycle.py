"""Checkpoint lifecycle: a checkpoint's expiry set or removed without loading it (tinker
``set_checkpoint_ttl_from_tinker_path``) and a model package group's retention rule."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.iam.resources import checkpoint_arn
from controlplane.registry import lifecycle
from controlplane.registry.models import RetentionRule
from controlplane.training_sessions.selectors import checkpoint_by_path

from .. import bodies
from ..external_weights import checkpoint_path
from ..parsing import body_of
from .registry import _group_arn


@api_view(["PUT"])
def checkpoint_ttl(request: Request, model_id: str, checkpoint_id: str) -> Response:
    """``{"ttl_seconds": n}`` expires the checkpoint n seconds from now; null: never."""
    tenant = tenant_of(request)
    path = checkpoint_path(model_id, checkpoint_id)
    body = body_of(request, bodies.CheckpointTtlBody)
    ckpt = checkpoint_by_path(tenant=tenant, tinker_path=path, field="checkpoint_id")
    allow(request, "sessions:SetCheckpointTtl", checkpoint_arn(tenant, ckpt.model_id, ckpt.name))
    expires = lifecycle.checkpoint_ttl_set(ckpt=ckpt, ttl_seconds=body.get("ttl_seconds"))
    return Response(
        {"tinker_path": ckpt.tinker_path, "expires_at": expires.isoformat() if expires else None}
    )


def rule_json(group: str, rule: RetentionRule | None) -> dict:
    return {
        "model_package_group_name": group,
        "keep_last": rule.keep_last if rule else None,
        "keep_approved": rule.keep_approved if rule else True,
        "updated_by": rule.updated_by if rule else None,
        "updated_at": rule.updated_at.isoformat() if rule else None,
    }


@api_view(["GET", "PUT", "DELETE"])
def retention(request: Request, name: str) -> Response:
    tenant = tenant_of(request)
    if request.method == "GET":
        allow(request, "registry:GetRetentionRule", _group_arn(request, name))
        return Response(rule_json(name, lifecycle.retention_get(tenant=tenant, group_name=name)))
    actor = principal_of(request).arn
    if request.method == "DELETE":
        allow(request, "registry:DeleteRetentionRule", _group_arn(request, name))
        lifecycle.retention_delete(tenant=tenant, actor=actor, group_name=name)
        return Response(status=204)
    body = body_of(request, bodies.RetentionRuleBody)
    allow(request, "registry:PutRetentionRule", _group_arn(request, name))
    rule = lifecycle.retention_put(
        tenant=tenant,
        actor=actor,
        group_name=name,
        keep_last=body.get("keep_last"),
        keep_approved=body.get("keep_approved", True),
    )
    return Response(rule_json(name, rule))
