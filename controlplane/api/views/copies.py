"""copy_weights: a checkpoint copied inside the account (see ``controlplane.registry.copies``)."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, tenant_of
from controlplane.registry.copies import CopyRequest, checkpoint_copy, idempotency_key
from loopwright.types import CopyWeightsRequest, CopyWeightsResponse

from ..parsing import parse


@api_view(["POST"])
def copy_weights(request: Request) -> Response:
    req = parse(request, CopyWeightsRequest)
    copy = checkpoint_copy(
        tenant=tenant_of(request),
        request=CopyRequest(
            source_path=req.source_path,
            session_id=req.session_id,
            model_seq_id=req.model_seq_id,
            destination_project_id=req.destination_project_id,
            ttl_seconds=req.ttl_seconds,
            weights_access_token=req.weights_access_token,
            idempotency_key=idempotency_key(request.headers.get("X-Idempotency-Key")),
        ),
        authorize=lambda action, resource: allow(request, action, resource),
    )
    return Response(CopyWeightsResponse(tinker_path=copy.tinker_path).model_dump(mode="json"))
