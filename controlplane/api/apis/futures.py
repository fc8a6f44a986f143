"""retrieve_future: long-poll an operation until it finishes or the poll times out (408)."""

from __future__ import annotations

import socket
import time

from django.conf import settings
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.iam.resources import session_arn
from controlplane.training_sessions import notify, selectors
from controlplane.training_sessions.services import failover
from loopwright.types import FutureRetrieveRequest

from ..answers import finished_body
from ..parsing import allow, parse, tenant_of


@api_view(["POST"])
def retrieve_future(request: Request) -> Response:
    req = parse(request, FutureRetrieveRequest)
    op = selectors.operation_get(tenant=tenant_of(request), request_id=req.request_id)
    allow(request, "sessions:RetrieveFuture", session_arn(tenant_of(request), op.session_id))
    op = notify.wait_finished(op, time.monotonic() + settings.LONG_POLL_SECONDS)
    body, status = finished_body(op)
    if status == 408:  # still waiting: perhaps on a worker that died and nobody noticed yet
        failover.look_for_dead_workers(by=f"control plane {socket.gethostname()}")
    return Response(body, status=status)
