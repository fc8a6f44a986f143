"""Endpoints about the service itself: health, client config, capabilities, base models."""

from __future__ import annotations

from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow
from controlplane.fleet.selectors import base_model_get, served_base_models
from controlplane.tenants.models import StorageLocation, Subnet
from controlplane.training_sessions.errors import NotFound
from controlplane.training_sessions.services.context import base_name
from controlplane.training_sessions.services.placement import served_capabilities
from loopwright.types import (
    ClientConfigResponse,
    ClientDynamicConfigResponse,
    GetServerCapabilitiesResponse,
    HealthResponse,
    SupportedModel,
)


@api_view(["GET"])
@authentication_classes([])
@permission_classes([AllowAny])
def healthz(request: Request) -> Response:
    return Response(HealthResponse(status="ok").model_dump(mode="json"))


# What every client is told. SDK 0.18–0.24 keep sending JSON (proto_write_fwdbwd stays off);
# SDK ≥ 0.25 and ours send forward_backward as zstd-compressed protobuf, forward included.
CLIENT_CONFIG = ClientConfigResponse(
    use_pyqwest_transport=False, proto_compress_fwdbwd=True, fwd_via_fwdbwd=True
).model_dump(mode="json")


@api_view(["POST"])
def client_config(request: Request) -> Response:
    """The official SDK asks first (a 404 breaks SDK 0.18–0.24); so does ours."""
    return Response(CLIENT_CONFIG)


@api_view(["POST"])
def client_dynamic_config(request: Request) -> Response:
    """Flags SDK ≥ 0.25 re-fetch in the background: sample cancellation stays off."""
    return Response(ClientDynamicConfigResponse().model_dump(mode="json"))


@api_view(["GET"])
def get_server_capabilities(request: Request) -> Response:
    """Every base model a live worker serves, its context length, and whether it can be
    trained and sampled now."""
    capable = served_capabilities()
    models = [
        SupportedModel(
            model_name=m.name,
            max_context_length=m.context_length,
            trainable=capable.get(m.name, (False, False))[0],
            sampleable=capable.get(m.name, (False, False))[1],
        )
        for m in served_base_models()
    ]
    return Response(GetServerCapabilitiesResponse(supported_models=models).model_dump(mode="json"))


@api_view(["GET"])
def base_models(request: Request) -> Response:
    allow(request, "sessions:ListBaseModels")
    return Response(
        {
            "base_models": [
                {
                    "name": m.name,
                    "context_length": m.context_length,
                    "description": m.description,
                    "chat_template": m.chat_template,
                }
                for m in served_base_models()
            ]
        }
    )


@api_view(["GET"])
def tokenizer(request: Request) -> Response:
    """The tokenizer files of a base model, so clients never reach a model hub."""
    allow(request, "sessions:ListBaseModels")
    name = request.query_params.get("name", "")
    model = base_model_get(base_name(name))  # ``<base>:peft:<n>`` is its base's tokenizer
    if model is None:
        raise NotFound(f"base model {name!r} not found", field="name")
    return Response({"base_model": model.name, "files": model.tokenizer_files})


@api_view(["POST"])
def telemetry(request: Request) -> Response:
    """The official SDK reports client telemetry here; accepted and not stored."""
    return Response({"status": "accepted"})


@api_view(["GET"])
def subnets(request: Request) -> Response:
    """The subnets of the caller's VPC that sessions may name in ``vpc_config``."""
    allow(request, "vpc:ListSubnets")
    found = Subnet.objects.filter(tenant=request.user.tenant).order_by("subnet_id")
    return Response(
        {"subnets": [{"subnet_id": s.subnet_id, "description": s.description} for s in found]}
    )


@api_view(["GET"])
def storage_locations(request: Request) -> Response:
    """The S3 locations the caller's sessions may name as ``s3_output_path``."""
    allow(request, "storage:ListLocations")
    found = StorageLocation.objects.filter(tenant=request.user.tenant).order_by("uri")
    return Response(
        {"locations": [{"uri": loc.uri, "description": loc.description} for loc in found]}
    )
