"""The OpenAI-compatible views: validate, call one service, serialize (or stream). Errors come
back in OpenAI's shape; the caller is authenticated by API key (``Authorization: Bearer``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from django.http import StreamingHttpResponse
from pydantic import BaseModel
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.edge.callers import allow, key_of, tenant_of
from controlplane.edge.errors import openai_exception_handler
from controlplane.edge.idempotency import idempotency_key

from . import live, responses, selectors, services, sse
from .schemas import ChatCompletionRequest, CompletionRequest


class OpenAIView(APIView):
    def get_exception_handler(self):
        return openai_exception_handler


def _authorizer(request: Request) -> services.Authorize:
    return lambda action, resource: allow(request, action, resource)


M = TypeVar("M", bound=BaseModel)


def parsed(request: Request, model: type[M]) -> M:
    """The JSON object body, validated by the request's schema."""
    if not isinstance(request.data, dict):
        raise ParseError("the request body must be a JSON object")
    return model.model_validate(request.data)


def _streamed(chunks: Iterable[dict | None]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(sse.event_stream(chunks), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies pass each event on at once
    return response


class ModelsView(OpenAIView):
    def get(self, request: Request) -> Response:
        allow(request, "sessions:ListTrainingSessions")
        return Response(
            {"object": "list", "data": selectors.models_list(tenant=tenant_of(request))}
        )


class ModelView(OpenAIView):
    def get(self, request: Request, model: str) -> Response:
        allow(request, "sessions:ListTrainingSessions")
        found = selectors.model_get(tenant=tenant_of(request), name=model)
        return Response(found)


class ChatCompletionsView(OpenAIView):
    def post(self, request: Request) -> Response | StreamingHttpResponse:
        req = parsed(request, ChatCompletionRequest)
        tenant, key = tenant_of(request), idempotency_key(request)
        if req.stream:
            prepared = services.chat_prepare(
                tenant=tenant, req=req, authorize=_authorizer(request), api_key=key_of(request)
            )
            return _streamed(
                live.stream(
                    tenant=tenant,
                    prepared=prepared,
                    idempotency_key=key,
                    chat=True,
                    logprobs=req.wants_logprobs,
                    include_usage=req.include_usage_chunk,
                )
            )
        done = services.chat_complete(
            tenant=tenant,
            req=req,
            authorize=_authorizer(request),
            idempotency_key=key,
            api_key=key_of(request),
        )
        return Response(responses.chat_completion(done, logprobs=req.wants_logprobs))


class CompletionsView(OpenAIView):
    def post(self, request: Request) -> Response | StreamingHttpResponse:
        req = parsed(request, CompletionRequest)
        tenant, key = tenant_of(request), idempotency_key(request)
        if req.stream:
            prepared = services.text_prepare(
                tenant=tenant, req=req, authorize=_authorizer(request), api_key=key_of(request)
            )
            return _streamed(
                live.stream(
                    tenant=tenant,
                    prepared=prepared,
                    idempotency_key=key,
                    chat=False,
                    logprobs=req.wants_logprobs,
                    include_usage=req.include_usage_chunk,
                )
            )
        done = services.text_complete(
            tenant=tenant,
            req=req,
            authorize=_authorizer(request),
            idempotency_key=key,
            api_key=key_of(request),
        )
        return Response(responses.text_completion(done, logprobs=req.wants_logprobs))
