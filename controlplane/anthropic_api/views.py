"""Anthropic's Messages views: validate, call one service, serialize (or stream). The caller is
authenticated by API key (``x-api-key``, as Anthropic's clients send it, or ``Authorization:
Bearer``); errors come back in Anthropic's shape; ``anthropic-version`` and ``anthropic-beta``
headers are accepted (one version of the API is served)."""

from __future__ import annotations

from typing import TypeVar

from django.http import StreamingHttpResponse
from pydantic import BaseModel
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.completions import live
from controlplane.edge.anthropic_errors import anthropic_exception_handler
from controlplane.edge.callers import allow, key_of, tenant_of
from controlplane.edge.idempotency import idempotency_key

from . import responses, services, sse
from .schemas import CountTokensRequest, MessagesRequest

M = TypeVar("M", bound=BaseModel)


class AnthropicView(APIView):
    def get_exception_handler(self):
        return anthropic_exception_handler

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        request_id = getattr(request, "request_id", None)
        if request_id:  # Anthropic's clients read it as the answer's ``_request_id``
            response["request-id"] = request_id
        return response


def _authorizer(request: Request) -> services.Authorize:
    return lambda action, resource: allow(request, action, resource)


def parsed(request: Request, model: type[M]) -> M:
    """The JSON object body, validated by the request's schema."""
    if not isinstance(request.data, dict):
        raise ParseError("the request body must be a JSON object")
    return model.model_validate(request.data)


class MessagesView(AnthropicView):
    def post(self, request: Request) -> Response | StreamingHttpResponse:
        req = parsed(request, MessagesRequest)
        tenant, key = tenant_of(request), idempotency_key(request)
        if req.stream:
            prepared = services.messages_prepare(
                tenant=tenant, req=req, authorize=_authorizer(request), api_key=key_of(request)
            )
            events = live.stream(tenant=tenant, prepared=prepared, idempotency_key=key)
            stream = sse.message_events(
                events, model=prepared.model, input_tokens=len(prepared.prompts[0])
            )
            response = StreamingHttpResponse(
                sse.event_stream(stream), content_type="text/event-stream"
            )
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"  # proxies pass each event on at once
            return response
        done = services.messages_complete(
            tenant=tenant,
            req=req,
            authorize=_authorizer(request),
            idempotency_key=key,
            api_key=key_of(request),
        )
        return Response(responses.message(done))


class CountTokensView(AnthropicView):
    def post(self, request: Request) -> Response:
        req = parsed(request, CountTokensRequest)
        count = services.tokens_count(
            tenant=tenant_of(request), req=req, authorize=_authorizer(request)
        )
        return Response({"input_tokens": count})
