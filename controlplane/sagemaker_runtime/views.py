"""The runtime's operations, one view each: find the caller's training session, call one
service, answer in the model's shape. The caller signs with SigV4 (an access key)."""

from __future__ import annotations

import json
import re

from django.http import HttpResponse
from rest_framework.request import Request
from rest_framework.views import APIView

from controlplane.access_keys.authentication import SigV4Authentication
from controlplane.api.json_body import loads
from controlplane.api.negotiation import AlwaysJSON
from controlplane.edge.callers import allow, tenant_of
from controlplane.errors import DomainError
from controlplane.iam.resources import session_arn
from controlplane.training_sessions.models import SamplingSession

from . import passthrough, results
from .errors import exception_handler, unknown_operation
from .sampling import sampling_execute
from .sessions import TrainingSession, training_session_get
from .training import training_execute

NAME = re.compile(r"[a-zA-Z0-9-]{1,64}")


class RuntimeView(APIView):
    schema = None  # botocore's service model describes it, not the OpenAPI document
    authentication_classes = [SigV4Authentication]
    content_negotiation_class = AlwaysJSON  # the answers are the model's, whatever Accept says

    def get_exception_handler(self):
        return exception_handler


def _named(value: str, member: str) -> str:
    if not NAME.fullmatch(value):
        raise DomainError(f"{member}: 1 to 64 letters, digits or '-'", field=member)
    return value


def _session(request: Request, name: str) -> TrainingSession:
    return training_session_get(tenant=tenant_of(request), name=_named(name, "trainingSessionName"))


def _body(request: Request) -> dict:
    body = loads(request.body) if request.body else {}
    if not isinstance(body, dict):
        raise DomainError("the request body must be a JSON object")
    return body


def _json(body: dict) -> HttpResponse:
    return HttpResponse(json.dumps(body), content_type="application/json")


def _may_retrieve(request: Request, ts: TrainingSession) -> None:
    allow(request, "sessions:RetrieveFuture", session_arn(ts.tenant, ts.session.id))


class TrainingOperations(RuntimeView):
    """``ExecuteTrainingOperation``."""

    def post(self, request: Request, name: str) -> HttpResponse:
        ts = _session(request, name)
        op = training_execute(request=request, ts=ts, raw=_body(request))
        return _json({"operationId": op.id})


class TrainingOperation(RuntimeView):
    """``GetTrainingOperationResult``."""

    def get(self, request: Request, name: str, operation_id: str) -> HttpResponse:
        ts = _session(request, name)
        op = results.operation_of(ts, _named(operation_id, "operationId"), sampling=False)
        _may_retrieve(request, ts)
        return _json(results.training_result(results.awaited(op)))


class SamplingOperations(RuntimeView):
    """``ExecuteSamplingOperation``."""

    def post(self, request: Request, name: str) -> HttpResponse:
        ts = _session(request, name)
        done = sampling_execute(request=request, ts=ts, raw=_body(request))
        return _json({"operationId": done.id})


class SamplingOperation(RuntimeView):
    """``GetSamplingOperationResult`` (of a sample, or of a ``loadWeightsForSampling``, whose id
    is the sampler it opened)."""

    def get(self, request: Request, name: str, operation_id: str) -> HttpResponse:
        ts = _session(request, name)
        operation_id = _named(operation_id, "operationId")
        sampler = SamplingSession.objects.filter(
            tenant=ts.tenant, session=ts.session, id=operation_id
        ).first()
        if sampler is not None:
            _may_retrieve(request, ts)
            return _json(results.loaded_result(sampler))
        op = results.operation_of(ts, operation_id, sampling=True)
        _may_retrieve(request, ts)
        return _json(results.sampling_result(results.awaited(op)))


class Sample(RuntimeView):
    """``SampleTrainingSession``: the OpenAI-shaped passthrough."""

    def post(self, request: Request, name: str) -> HttpResponse:
        return passthrough.sample(request=request, ts=_session(request, name), stream=False)


class SampleStream(RuntimeView):
    """``SampleTrainingSessionWithResponseStream``: the same, as server-sent events."""

    def post(self, request: Request, name: str) -> HttpResponse:
        return passthrough.sample(request=request, ts=_session(request, name), stream=True)


def unknown(request, *args, **kwargs) -> HttpResponse:
    return unknown_operation(request)
