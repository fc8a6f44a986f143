"""retrieve_future: long-poll an operation until it finishes or the poll times out (408).

A finished sample or forward(-backward) is answered as protobuf when ``Accept`` asks for it
(tinker SDK ≥ 0.25 accepts nothing else), as JSON otherwise; every other answer is JSON.
"""

from __future__ import annotations

import socket
import time

from django.conf import settings
from django.http import HttpResponse
from rest_framework.decorators import api_view, content_negotiation_class
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.edge.callers import allow, tenant_of
from controlplane.iam.resources import session_arn
from controlplane.operations import notices
from controlplane.training_sessions import selectors
from controlplane.training_sessions.models import Operation
from controlplane.training_sessions.services import failover
from loopwright.types import FutureRetrieveRequest

from ..negotiation import PROTOBUF_CONTENT_TYPE, AlwaysJSON, wants_protobuf
from ..operation_responses import finished_body, result_body
from ..parsing import parse
from ..protobuf_results import PROTOBUF_KINDS, encode_result


@api_view(["POST"])
@content_negotiation_class(AlwaysJSON)
def retrieve_future(request: Request) -> Response | HttpResponse:
    req = parse(request, FutureRetrieveRequest)
    op = selectors.operation_get(tenant=tenant_of(request), request_id=req.request_id)
    allow(request, "sessions:RetrieveFuture", session_arn(tenant_of(request), op.session_id))
    op = notices.wait_finished(op, time.monotonic() + settings.LONG_POLL_SECONDS)
    if op.status == Operation.Status.DONE and op.kind in PROTOBUF_KINDS and wants_protobuf(request):
        return _protobuf(op)
    body, status = finished_body(op)
    if status == 408:  # still waiting: perhaps on a worker that died and nobody noticed yet
        failover.look_for_dead_workers(by=f"control plane {socket.gethostname()}")
    return Response(body, status=status)


def _protobuf(op: Operation) -> HttpResponse | Response:
    try:
        content = encode_result(op.kind, result_body(op))
    except (KeyError, TypeError, ValueError) as exc:
        # a stored result the message cannot hold: the future fails (a 5xx would be retried
        # by the SDK for ever)
        error = f"the result of {op.id} cannot be encoded as protobuf: {exc}"
        return Response({"error": error, "category": "server"})
    return HttpResponse(content, content_type=PROTOBUF_CONTENT_TYPE)
