"""``SampleTrainingSession`` and ``SampleTrainingSessionWithResponseStream``: the body is an
OpenAI chat completion (``messages``) or completion (``prompt``) request, answered by the OpenAI
face's services exactly as ``/v1`` answers it (rendering, sampling, metering, IAM), on the
session's sampler: the version ``X-Amzn-SageMaker-Model-Package`` names, else the session's
latest checkpoint (``sampling.sampler_for``). The body's ``model`` is the session's choice; the
streamed answer is OpenAI's server-sent events, ``data: {chunk}`` … ``data: [DONE]``."""

from __future__ import annotations

import json

from django.http import HttpResponse, StreamingHttpResponse

from controlplane.api.json_body import loads
from controlplane.edge.callers import allow, key_of
from controlplane.errors import DomainError
from controlplane.openai_api import live, responses, services, sse
from controlplane.openai_api.schemas import ChatCompletionRequest, CompletionRequest

from .sampling import sampler_for
from .sessions import TrainingSession

MODEL_PACKAGE_HEADER = "X-Amzn-SageMaker-Model-Package"


def _request(raw: bytes, model: str, stream: bool) -> ChatCompletionRequest | CompletionRequest:
    body = loads(raw) if raw else None
    if not isinstance(body, dict):
        raise DomainError("body: an OpenAI chat completion or completion request (a JSON object)")
    body = {k: v for k, v in body.items() if k != "stream"}
    body["model"] = model
    if stream:
        body["stream"] = True
    else:
        body.pop("stream_options", None)
    schema = ChatCompletionRequest if "messages" in body else CompletionRequest
    return schema.model_validate(body)


def sample(*, request, ts: TrainingSession, stream: bool) -> HttpResponse:
    arn = request.headers.get(MODEL_PACKAGE_HEADER) or None
    sampler = sampler_for(request, ts, arn, MODEL_PACKAGE_HEADER)
    req = _request(request.body, sampler.id, stream)
    chat = isinstance(req, ChatCompletionRequest)

    def authorize(action: str, resource: str) -> None:
        allow(request, action, resource)

    tenant = ts.tenant
    if not stream:
        complete = services.chat_complete if chat else services.text_complete
        done = complete(  # type: ignore[operator]
            tenant=tenant, req=req, authorize=authorize, api_key=key_of(request)
        )
        answer = responses.chat_completion if chat else responses.text_completion
        return _json(answer(done, logprobs=req.wants_logprobs))
    prepare = services.chat_prepare if chat else services.text_prepare
    prepared = prepare(  # type: ignore[operator]
        tenant=tenant, req=req, authorize=authorize, api_key=key_of(request)
    )
    chunks = live.stream(
        tenant=tenant,
        prepared=prepared,
        idempotency_key=None,
        chat=chat,
        logprobs=req.wants_logprobs,
        include_usage=req.include_usage_chunk,
    )
    response = StreamingHttpResponse(sse.event_stream(chunks), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy passes each event on at once
    return response


def _json(body: dict) -> HttpResponse:
    return HttpResponse(json.dumps(body), content_type="application/json")
