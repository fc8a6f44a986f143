"""Training models: create, describe, unload; checkpoints and training runs."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    content_negotiation_class,
    permission_classes,
    throttle_classes,
)
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.fleet.selectors import base_model_get
from controlplane.iam.access import authorize
from controlplane.iam.resources import model_arn, session_arn
from controlplane.operations import training
from controlplane.registry.download_response import package_download_response
from controlplane.training_sessions import selectors
from controlplane.training_sessions.models import Checkpoint, TrainingModel
from controlplane.training_sessions.queue_status import model_queue_status
from controlplane.training_sessions.services.lora import optimizer_of, with_optimizer
from loopwright.types import (
    CreateModelRequest,
    GetInfoRequest,
    UnloadModelRequest,
    WeightsInfoRequest,
)

from .. import checkpoint_search as checkpoint_searching
from .. import external_weights
from ..checkpoint_search import CheckpointSearchQuery
from ..operation_responses import future, queue_json
from ..parsing import body_object, parse, query_int
from .registry import GzipOrJSON


def placement_json(m: TrainingModel) -> dict:
    """Where the model runs, or (``placement`` waiting_for_*) why it waits for a worker; how
    many workers it trains on, and the group they form once it has one (data parallel, or a
    base sharded over them)."""
    found = selectors.model_replica_group(m)
    group = None
    if found is not None:
        g, members = found
        group = {
            "id": g.pk,
            "state": g.state,
            "sharded": g.sharded,  # the base is sharded over the members
            "members": [{"name": w.name, "rank": w.rank} for w in members],
        }
    return {
        "placement": m.placement,
        "status_reason": m.status_reason,
        "worker": m.worker.name if m.worker_id else None,
        "replicas": m.replicas,
        "group": group,
        "queue": queue_json(model_queue_status(m)),  # its place in line while it waits
    }


@api_view(["POST"])
def create_model(request: Request) -> Response:
    req = parse(request, CreateModelRequest)
    lora = req.lora_config.model_dump(mode="json") if req.lora_config else {"rank": 32}
    lora.pop("type", None)
    if not lora.get("train_projector"):  # written only when on: earlier requests digest as before
        lora.pop("train_projector", None)
    family = req.optimizer_config.type if req.optimizer_config else "adamw"
    lora = with_optimizer(lora, family)
    replicas = req.replicas or 1  # not sent (tinker's SDKs): one worker
    allow(
        request,
        "sessions:CreateModel",
        model_arn(tenant_of(request), "*"),
        **training.create_model_conditions(base_model=req.base_model, lora=lora, replicas=replicas),
    )
    op = training.model_create(
        tenant=tenant_of(request),
        session_id=req.session_id,
        model_seq_id=req.model_seq_id,
        base_model=req.base_model,
        lora=lora,
        user_metadata=req.user_metadata,
        replicas=replicas,
        context_length=req.context_length,
    )
    return future(request, op, op.model_id)


@api_view(["POST"])
def get_info(request: Request) -> Response:
    req = parse(request, GetInfoRequest)
    allow(request, "sessions:GetModelInfo", model_arn(tenant_of(request), req.model_id))
    model = selectors.model_get(tenant=tenant_of(request), model_id=req.model_id)
    base = base_model_get(model.base_model)
    # model_name must load with AutoTokenizer.from_pretrained offline: the worker's folder.
    name = base.tokenizer_path if base and base.tokenizer_path else model.base_model
    return Response(
        {
            "type": "get_info",
            "model_id": model.id,
            "model_data": {"model_name": name, "arch": "llama", "tokenizer_id": model.base_model},
            "is_lora": True,
            "lora_rank": model.lora.get("rank"),
            "model_name": model.base_model,
            "state": model.state,
            "lora": model.lora,
            "optimizer": optimizer_of(model.lora),
            "context_length": model.context_length or (base.context_length if base else None),
            "session_id": model.session_id,
            "next_seq_id": selectors.model_next_free_seq(model),
            "next_sampling_session_seq_id": selectors.session_next_free_sampler_seq(model.session),
            **placement_json(model),
        }
    )


@api_view(["POST"])
def unload_model(request: Request) -> Response:
    req = parse(request, UnloadModelRequest)
    allow(request, "sessions:UnloadModel", model_arn(tenant_of(request), req.model_id))
    model = selectors.model_get(tenant=tenant_of(request), model_id=req.model_id)
    op = training.model_unload(tenant=tenant_of(request), model=model)
    return future(request, op, model.id)


@api_view(["POST"])
def weights_info(request: Request) -> Response:
    req = parse(request, WeightsInfoRequest)
    ckpt = selectors.checkpoint_by_path(
        tenant=tenant_of(request), tinker_path=req.tinker_path, field="tinker_path"
    )
    allow(request, "sessions:GetModelInfo", model_arn(tenant_of(request), ckpt.model_id))
    lora = ckpt.lora
    return Response(
        {
            "base_model": ckpt.base_model,
            "is_lora": True,
            "lora_rank": lora.get("rank"),
            "train_unembed": lora.get("train_unembed", True),
            "train_mlp": lora.get("train_mlp", True),
            "train_attn": lora.get("train_attn", True),
            "train_projector": bool(lora.get("train_projector", False)),
            "lora_alpha": lora.get("alpha"),
            "checkpoint_type": ckpt.kind,
            "optimizer": optimizer_of(lora),
        }
    )


def checkpoint_json(c: Checkpoint) -> dict:
    folder = "weights" if c.kind == Checkpoint.Kind.TRAINING else "sampler_weights"
    return {
        "checkpoint_id": f"{folder}/{c.name}",
        "checkpoint_type": c.kind,
        "time": c.created_at.isoformat(),
        "tinker_path": c.tinker_path,
        "size_bytes": c.size_bytes,
        "public": False,
        "expires_at": c.expires_at.isoformat() if c.expires_at else None,
        "base_model": c.base_model,  # tinker 0.39's Checkpoint.base_model
    }


def run_json(m: TrainingModel) -> dict:
    ckpts = list(m.checkpoints.order_by("-created_at"))
    last_train = next((c for c in ckpts if c.kind == Checkpoint.Kind.TRAINING), None)
    last_sampler = next((c for c in ckpts if c.kind == Checkpoint.Kind.SAMPLER), None)
    return {
        "training_run_id": m.id,
        "base_model": m.base_model,
        "model_owner": str(m.tenant_id),
        "is_lora": True,
        "corrupted": m.state == TrainingModel.State.FAILED,
        "lora_rank": m.lora.get("rank"),
        "last_request_time": m.last_request_at.isoformat(),
        "last_checkpoint": checkpoint_json(last_train) if last_train else None,
        "last_sampler_checkpoint": checkpoint_json(last_sampler) if last_sampler else None,
        "user_metadata": m.user_metadata,
        "state": m.state,
        "session_id": m.session_id,
        **placement_json(m),
    }


@api_view(["GET"])
def training_runs(request: Request) -> Response:
    limit = query_int(request, "limit", 20, 1, 1000)
    offset = query_int(request, "offset", 0, 0, 2**31)
    tenant = tenant_of(request)
    allow(request, "sessions:ListTrainingSessions")
    runs = selectors.model_list(tenant=tenant, limit=limit, offset=offset)
    total = TrainingModel.objects.filter(tenant=tenant).count()
    return Response(
        {
            "training_runs": [run_json(m) for m in runs],
            "cursor": {"offset": offset, "limit": limit, "total_count": total},
        }
    )


@api_view(["GET"])
def training_run(request: Request, model_id: str) -> Response:
    allow(request, "sessions:GetModelInfo", model_arn(tenant_of(request), model_id))
    return Response(run_json(selectors.model_get(tenant=tenant_of(request), model_id=model_id)))


@api_view(["GET"])
def training_run_checkpoints(request: Request, model_id: str) -> Response:
    tenant = tenant_of(request)
    model = selectors.model_get(tenant=tenant, model_id=model_id)
    allow(request, "sessions:ListCheckpoints", session_arn(tenant, model.session_id))
    return Response(
        {
            "checkpoints": [
                checkpoint_json(c) for c in selectors.checkpoint_list(tenant=tenant, model=model)
            ]
        }
    )


@api_view(["GET"])
def external_weights_urls(request: Request, model_id: str, checkpoint_id: str) -> Response:
    """Time-limited download links to a checkpoint's files (tinker ``get_external_weights_urls``):
    ``{urls: {file: url}, expires}``, authorized now, usable without a key until they expire."""
    tenant = tenant_of(request)
    path = external_weights.checkpoint_path(model_id, checkpoint_id)
    return Response(
        external_weights.links_issue(
            tenant=tenant,
            path=path,
            authorize=lambda action, resource: allow(request, action, resource),
            principal=principal_of(request),
            base_url=request.build_absolute_uri("/").rstrip("/"),
        )
    )


@api_view(["GET"])
@authentication_classes([])
@permission_classes([AllowAny])
@throttle_classes([])
@content_negotiation_class(GzipOrJSON)
def signed_download(request: Request) -> StreamingHttpResponse:
    """What a link of ``external_weights_urls`` downloads (``?token=``): the registry's archive
    of the package (adapter or merged), authorized and audited as the link's issuer, now."""
    link = external_weights.link_open(request.query_params.get("token", ""))

    def as_issuer(action: str, resource: str) -> None:
        authorize(link.principal, action, resource, request=request)

    as_issuer("sessions:GetCheckpointDownloadLinks", link.resource)
    return package_download_response(
        package=link.package,
        format=link.format,
        include_optimizer=False,
        field="token",
        authorize=as_issuer,
        actor=link.principal.arn,
    )


@api_view(["POST"])
def checkpoint_search(request: Request) -> Response:
    """The account's checkpoints, newest first, by kind, base model and save metadata (tinker's
    ``search_checkpoints``)."""
    query = CheckpointSearchQuery.model_validate(body_object(request))
    tenant = tenant_of(request)
    allow(request, "sessions:ListCheckpoints", session_arn(tenant, "*"))
    page, metadata, cursor = checkpoint_searching.checkpoint_search(tenant=tenant, query=query)
    return Response(
        {
            "checkpoints": [
                {
                    **checkpoint_json(c),
                    "training_run_id": c.model_id,
                    "user_metadata": metadata.get(c.tinker_path) or None,
                }
                for c in page
            ],
            "next_cursor": cursor,
        }
    )
