"""retrieve_future: long-poll an operation until it finishes or the poll times out (408)."""

from __future__ import annotations

import time

from django.conf import settings
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.iam.resources import session_arn
from controlplane.training_sessions import notify, selectors
from controlplane.training_sessions.models import Operation
from loopwright.types import FutureRetrieveRequest

from ..parsing import allow, parse, public, tenant_of


@api_view(["POST"])
def retrieve_future(request: Request) -> Response:
    req = parse(request, FutureRetrieveRequest)
    op = selectors.operation_get(tenant=tenant_of(request), request_id=req.request_id)
    allow(request, "sessions:RetrieveFuture", session_arn(tenant_of(request), op.session_id))
    op = _wait_notified(op) if notify.available() else _wait_polling(op)
    if op.status == Operation.Status.DONE:
        return Response(public(op.result))
    if op.status == Operation.Status.FAILED:
        return Response({"error": op.error, "category": op.error_category or "server"})
    state, reason = selectors.operation_queue_state(op)
    body = {"type": "try_again", "request_id": op.id, "queue_state": state}
    if reason:
        body["queue_state_reason"] = reason  # e.g. why its model still waits for a worker
    return Response(body, status=408)


def _wait_notified(op: Operation) -> Operation:
    """Sleep until the worker's NOTIFY (or, as a fallback, a periodic look) says it finished."""
    deadline = time.monotonic() + settings.LONG_POLL_SECONDS
    event = notify.listener.register(op.pk)
    try:
        # Look again now that we listen: a notice sent before registering is not missed.
        op.refresh_from_db(fields=["status", "result", "error", "error_category"])
        while op.status not in Operation.FINISHED:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            event.wait(min(remaining, 1.0))
            event.clear()
            op.refresh_from_db(fields=["status", "result", "error", "error_category"])
    finally:
        notify.listener.unregister(op.pk, event)
    return op


def _wait_polling(op: Operation) -> Operation:
    started = time.monotonic()
    deadline = started + settings.LONG_POLL_SECONDS
    pause = 0.001
    while op.status not in Operation.FINISHED and time.monotonic() < deadline:
        time.sleep(pause)
        # Poll tightly while short operations usually finish, then back off.
        if time.monotonic() - started > 0.1:
            pause = min(pause * 1.5, 0.05)
        op.refresh_from_db(fields=["status", "result", "error", "error_category"])
    return op
