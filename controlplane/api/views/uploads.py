"""Weights made elsewhere, uploaded into the account (tinker 0.39's external weights upload; see
``controlplane.registry.uploads``): start, a signed PUT per file, finish."""

from __future__ import annotations

from urllib.parse import urlencode

from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.audit.services import audited_transaction
from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.iam.resources import checkpoint_arn
from controlplane.registry import uploads
from loopwright.types import (
    ExternalWeightsUploadFinishRequest,
    ExternalWeightsUploadFinishResponse,
    ExternalWeightsUploadStartRequest,
    ExternalWeightsUploadStartResponse,
)

from ..parsing import parse


@api_view(["POST"])
def external_weights_upload_start(request: Request) -> Response:
    """A new upload: ``{upload_id, urls: {file: url}, expires}``; each URL takes its file by PUT,
    without a key, until it expires."""
    req = parse(request, ExternalWeightsUploadStartRequest)
    tenant = tenant_of(request)
    with audited_transaction():
        upload, tokens = uploads.upload_start(
            tenant=tenant,
            actor=principal_of(request).arn,
            base_model=req.base_model,
            lora=req.lora_config.model_dump(exclude={"type"}),
            destination_project_id=req.destination_project_id,
            authorize=lambda action, resource: allow(request, action, resource),
        )
    base = request.build_absolute_uri("/").rstrip("/")
    answer = ExternalWeightsUploadStartResponse(
        upload_id=upload.id,
        urls={
            f: f"{base}/api/v1/registry/signed-uploads?{urlencode({'token': t})}"
            for f, t in tokens.items()
        },
        expires=upload.expires_at,
    )
    return Response(answer.model_dump(mode="json"))


@api_view(["PUT"])
@authentication_classes([])
@permission_classes([AllowAny])
@throttle_classes([])
def signed_upload(request: Request) -> Response:
    """One file of an upload, its bytes as the body (authorized when the link was made; the
    upload is finished only by a caller with a key). The token is a query parameter, which the
    logs scrub, like a signed download's."""
    token = request.query_params.get("token", "")
    length = request.META.get("CONTENT_LENGTH")
    taken = uploads.upload_put(
        token=token, body=request._request, length=int(length) if length else None
    )
    return Response(taken)


@api_view(["POST"])
def external_weights_upload_finish(request: Request) -> Response:
    """The checkpoint the uploaded files make: ``{tinker_path}`` (the same for a retry)."""
    req = parse(request, ExternalWeightsUploadFinishRequest)
    tenant = tenant_of(request)
    upload = uploads.upload_of(tenant=tenant, upload_id=req.upload_id)
    name = upload.tinker_path.rsplit("/", 1)[1]
    allow(request, "sessions:UploadExternalWeights", checkpoint_arn(tenant, upload.model_id, name))
    checkpoint = uploads.upload_finish(tenant=tenant, upload_id=req.upload_id)
    answer = ExternalWeightsUploadFinishResponse(tinker_path=checkpoint.tinker_path)
    return Response(answer.model_dump(mode="json"))
