"""Training operations of a model: each returns a future at once and runs in seq_id order."""

from __future__ import annotations

import functools

from pydantic import ValidationError
from rest_framework.decorators import api_view, content_negotiation_class, parser_classes
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.audit.services import audited_transaction
from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.errors import DomainError
from controlplane.iam.access import decide
from controlplane.iam.resources import model_arn
from controlplane.operations import training, weights
from controlplane.training_sessions.models import Operation, new_id
from loopwright.types import (
    LoadWeightsRequest,
    SaveWeightsExternalRequest,
    SaveWeightsForSamplerRequest,
    SaveWeightsRequest,
)

from .. import operation_responses as responses
from ..json_body import JSONBodyParser
from ..negotiation import AlwaysJSON
from ..operation_responses import future
from ..parsing import parse
from ..protobuf_bodies import ProtobufAliasParser, ProtobufParser, is_protobuf


def _step(request: Request, kind: str, body: object = None) -> Response:
    """A training step (forward, forward_backward, optim_step): its body read (unless given),
    the caller's IAM decision on its model (written with the operation), one submit (which
    records a refusal), the future."""
    if body is None:
        body = _body(request, kind)
    tenant = tenant_of(request)
    model_id = body.get("model_id") if isinstance(body, dict) else None
    access = decide(
        principal_of(request),
        ACTIONS[kind],
        model_arn(tenant, str(model_id or "*")),
        request=request,
    )
    request_id = new_id("req")
    with responses.listening(request, request_id) as waiter:  # before the insert commits
        op = training.submit(
            tenant=tenant, kind=kind, body=body, access=access, request_id=request_id
        )
        return future(request, op, op.model_id, waiter)


def sequenced(kind: str):
    """A model's other ordered operations: authorized and submitted in one transaction with
    the audit row. A refused training request still uses up its seq_id (see
    training.training_reject)."""

    def wrap(view):
        @functools.wraps(view)
        def inner(request: Request, *args, **kwargs) -> Response:
            body = _body(request, kind)
            try:
                with audited_transaction():  # the audit row and the operation: one commit
                    model_id = body.get("model_id") if isinstance(body, dict) else None
                    resource = model_arn(tenant_of(request), str(model_id or "*"))
                    allow(request, ACTIONS[kind], resource)
                    return view(request, *args, **kwargs)
            except (DomainError, ValidationError, ParseError) as exc:
                _refused(request, kind, exc)
                raise

        return inner

    return wrap


def _body(request: Request, kind: str):
    """The request's body, parsed (JSON, or protobuf for forward_backward); one that does not
    parse is refused, and takes its seq_id where it names one."""
    try:
        return request.data
    except (DomainError, ValidationError, ParseError) as exc:
        _refused(request, kind, exc)
        raise


def _refused(request: Request, kind: str, exc: Exception) -> None:
    """A refusal before (or around) the service's submit, recorded as the service records
    its own (``training.refused_on_arrival``)."""
    training.refused_on_arrival(tenant=tenant_of(request), kind=kind, body=request.data, exc=exc)


ACTIONS = {
    Operation.Kind.FORWARD: "sessions:Forward",
    Operation.Kind.FORWARD_BACKWARD: "sessions:ForwardBackward",
    Operation.Kind.OPTIM_STEP: "sessions:OptimStep",
    Operation.Kind.SAVE_WEIGHTS: "sessions:SaveWeights",
    Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER: "sessions:SaveWeightsForSampler",
    Operation.Kind.LOAD_WEIGHTS: "sessions:LoadWeights",
}


@api_view(["POST"])
def forward(request: Request) -> Response:
    return _step(request, Operation.Kind.FORWARD)


@api_view(["POST"])
@parser_classes([JSONBodyParser, ProtobufParser, ProtobufAliasParser])
@content_negotiation_class(AlwaysJSON)  # a protobuf client's Accept is answered, never a 406
def forward_backward(request: Request) -> Response:
    """JSON, or a protobuf ``ForwardBackwardRequest`` (tinker SDK ≥ 0.25). A protobuf body with
    ``forward_only`` is a forward: it runs as one and never touches gradients."""
    kind = Operation.Kind.FORWARD_BACKWARD
    body = _body(request, kind)
    if is_protobuf(request) and isinstance(body, dict) and "forward_input" in body:
        kind = Operation.Kind.FORWARD
    return _step(request, kind, body)


@api_view(["POST"])
def optim_step(request: Request) -> Response:
    return _step(request, Operation.Kind.OPTIM_STEP)


@api_view(["POST"])
@sequenced(Operation.Kind.SAVE_WEIGHTS)
def save_weights(request: Request) -> Response:
    req = parse(request, SaveWeightsRequest)
    op = weights.save_weights_submit(tenant=tenant_of(request), req=req)
    return future(request, op, req.model_id)


@api_view(["POST"])
@sequenced(Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER)
def save_weights_for_sampler(request: Request) -> Response:
    req = parse(request, SaveWeightsForSamplerRequest)
    op = weights.save_weights_for_sampler_submit(tenant=tenant_of(request), req=req)
    return future(request, op, req.model_id)


@api_view(["POST"])
@sequenced(Operation.Kind.LOAD_WEIGHTS)
def load_weights(request: Request) -> Response:
    req = parse(request, LoadWeightsRequest)
    if req.model_id is None:
        return _load_new_model(request, req)
    op = weights.load_weights_submit(tenant=tenant_of(request), req=req)
    return future(request, op, req.model_id)


def _load_new_model(request: Request, req: LoadWeightsRequest) -> Response:
    """A model made by loading a checkpoint, authorized as a create_model of its shape."""
    tenant = tenant_of(request)
    base_model, lora = weights.new_model_shape(tenant=tenant, req=req)
    allow(
        request,
        "sessions:CreateModel",
        model_arn(tenant, "*"),
        # a loaded model trains on one worker
        **training.create_model_conditions(base_model=base_model, lora=lora),
    )
    op = weights.load_new_model(tenant=tenant, req=req, base_model=base_model, lora=lora)
    return future(request, op, op.model_id)


@api_view(["POST"])
@sequenced(Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER)
def save_weights_external(request: Request) -> Response:
    """Weights for use elsewhere (tinker SDK ≥ 0.30): a sampler checkpoint saved with its merged
    model, answered as ``tinker://<model_id>/external_weights/<name>``; its files are then
    downloaded through ``external_weights_urls``."""
    req = parse(request, SaveWeightsExternalRequest)
    op = weights.save_weights_external_submit(tenant=tenant_of(request), req=req)
    return future(request, op, req.model_id)
