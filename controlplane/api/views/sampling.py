"""Samplers and sampling: requests run concurrently, batched per adapter on the worker."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.errors import DomainError
from controlplane.iam.access import decide
from controlplane.iam.resources import sampler_arn
from controlplane.operations import sampling
from controlplane.training_sessions import selectors
from controlplane.training_sessions.models import new_id
from controlplane.training_sessions.queue_status import sampler_queue_status
from controlplane.training_sessions.services.sample_options import (
    sample_options,
    structure_check,
)
from loopwright.types import CreateSamplingSessionRequest, SampleRequest

from ..operation_responses import future, listening, queue_json
from ..parsing import body_object, parse


@api_view(["POST"])
def create_sampling_session(request: Request) -> Response:
    req = parse(request, CreateSamplingSessionRequest)
    allow(request, "sessions:CreateSamplingSession", sampler_arn(tenant_of(request), "*"))
    sampler = sampling.sampler_create(
        tenant=tenant_of(request),
        session_id=req.session_id,
        seq=req.sampling_session_seq_id,
        base_model=req.base_model,
        model_path=req.model_path,
        model_id=req.model_id,
        queue=True,  # no worker reaches the session's network yet: it waits for one
    )
    return Response(
        {
            "type": "create_sampling_session",
            "sampling_session_id": sampler.id,
            "queue": queue_json(sampler_queue_status(sampler)),
        }
    )


@api_view(["POST"])
def asample(request: Request) -> Response:
    body = body_object(request)
    sample_options(body)
    req = SampleRequest.model_validate(body)
    structure_check(req.sampling_params)
    if not req.sampling_session_id:
        raise DomainError(
            "sampling_session_id is required (create a sampling session first)",
            field="sampling_session_id",
        )
    payload = req.model_dump(mode="json", exclude={"seq_id", "sampling_session_id", "type"})
    tenant = tenant_of(request)
    access = decide(
        principal_of(request),
        "sessions:Sample",
        sampler_arn(tenant, req.sampling_session_id),
        request=request,
    )
    request_id = new_id("req")
    with listening(request, request_id) as waiter:  # before the insert commits
        return sampling.submit(  # in one statement where it can be, else in one transaction
            tenant=tenant,
            sampling_session_id=req.sampling_session_id,
            seq_id=req.seq_id,
            payload=payload,
            access=access,
            request_id=request_id,
            # the RetrieveFuture decision: audited in the same commit on the portable way
            answer=lambda op: future(request, op, None, waiter),
        )


@api_view(["GET"])
def sampler_detail(request: Request, sampler_id: str) -> Response:
    allow(request, "sessions:DescribeTrainingSession", sampler_arn(tenant_of(request), sampler_id))
    s = selectors.sampler_get(tenant=tenant_of(request), sampling_session_id=sampler_id)
    return Response(
        {
            "sampler_id": s.id,
            "base_model": s.base_model,
            "model_path": s.model_path or None,
            "model_id": s.live_model_id,
            "worker": s.worker.name if s.worker_id else None,
            "queue": queue_json(sampler_queue_status(s)),
        }
    )
