"""What an operation's future answers: the handle a submit returns, the finished result (or the
try-again) that ``retrieve_future`` returns, and both in one streamed response for a client that
asks for it with ``Prefer: wait=N`` (RFC 7240).

A streamed submit is NDJSON: the handle's line is sent as soon as the operation is committed
(so the client can send its next request), then the line that ``retrieve_future`` would have
answered, once the operation finishes or ``N`` seconds pass (a ``try_again`` line, after which
the client long-polls as usual). It saves the client a ``retrieve_future`` request per
operation; the official tinker SDK never asks and gets the plain handle. The lines are JSON:
a caller that accepts only protobuf results (``Accept``) gets the handle alone and retrieves
the outcome with ``retrieve_future``, which answers protobuf.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext

from django.conf import settings
from django.http import StreamingHttpResponse
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.iam.resources import session_arn
from controlplane.operations import notices
from controlplane.training_sessions.models import Operation
from controlplane.training_sessions.queue_status import (
    operation_queue_state,
    operation_queue_status,
)
from loopwright.types import QueueStatus, UntypedAPIFuture

from .negotiation import accepts_json
from .parsing import public

CONTENT_TYPE = "application/x-ndjson"
FAILURE_DETAIL = ("code", "resume_from")
_WAIT = re.compile(r"(?:^|[,;\s])wait\s*=\s*\"?(\d+(?:\.\d+)?)\"?", re.IGNORECASE)


def handle_body(op: Operation, model_id: str | None = None) -> dict:
    body = UntypedAPIFuture(request_id=op.id, model_id=model_id).model_dump(
        mode="json", exclude_none=True
    )
    if op.kind == Operation.Kind.SAMPLE:
        body["sample_sequence_ids"] = sample_sequence_ids(op)
    waits = op.kind == Operation.Kind.CREATE_MODEL and op.status == Operation.Status.PENDING
    if waits and (queued := operation_queue_status(op)) is not None:
        body["queue"] = queue_json(queued)  # no worker can take it now: its place in line
    return body


def sample_sequence_ids(op: Operation) -> list[str]:
    """The ids of a sample operation's sequences: stable (a retried request gets its operation
    back, so the same ids) and unique in the tenant (the operation's id is)."""
    count = int((op.payload or {}).get("num_samples") or 1)
    return [f"{op.id}:{i}" for i in range(count)]


def result_body(op: Operation) -> dict:
    """A finished operation's JSON result; a sample's sequences carry their ``sequence_id``."""
    body = public(op.result)
    if (op.payload or {}).get("external") and isinstance(body.get("path"), str):
        # save_weights_external: the sampler checkpoint, named as tinker names these
        body["path"] = body["path"].replace("/sampler_weights/", "/external_weights/", 1)
        body["type"] = "save_weights_external"
    if op.kind == Operation.Kind.SAMPLE and isinstance(body.get("sequences"), list):
        ids = sample_sequence_ids(op)
        body["sequences"] = [
            {**seq, "sequence_id": ids[i]} if i < len(ids) and isinstance(seq, dict) else seq
            for i, seq in enumerate(body["sequences"])
        ]
    return body


def finished_body(op: Operation) -> tuple[dict, int]:
    """The answer for ``op`` as it stands: its result (200), its error (200 ``{error,
    category}``) or, still pending, a try-again naming how it waits (408)."""
    if op.status == Operation.Status.DONE:
        return result_body(op), 200
    if op.status == Operation.Status.FAILED:
        body = {"error": op.error, "category": op.error_category or "server"}
        if op.result:  # e.g. a model lost for good: ``code`` and where it can resume from
            body.update({k: op.result[k] for k in FAILURE_DETAIL if k in op.result})
        return body, 200
    state, reason, queued = operation_queue_state(op)
    body = {"type": "try_again", "request_id": op.id, "queue_state": state}
    if reason:
        body["queue_state_reason"] = reason  # e.g. why its model still waits for a worker
    if queued is not None:
        body["queue"] = queue_json(queued)  # its place in line and likely start
    return body, 408


def queue_json(status: QueueStatus | None) -> dict | None:
    """A place in the placement queue as the API answers it (None: not queued)."""
    return status.model_dump(mode="json") if status is not None else None


def wait_preference(request: Request) -> float | None:
    """The seconds of a ``Prefer: wait=N`` header, capped at the long poll's; None without."""
    match = _WAIT.search(request.META.get("HTTP_PREFER", ""))
    if match is None:
        return None
    return min(float(match.group(1)), settings.LONG_POLL_SECONDS)


def listening(request: Request, request_id: str) -> AbstractContextManager[notices.Waiter | None]:
    """Entered before an operation ``request_id`` is inserted: listen for its outcome if the
    caller prefers to wait for it (then the wait needs no look at the row); give the waiter to
    ``future`` inside the block. A waiter no answer streams is released as the block ends."""
    if wait_preference(request) is None:
        return nullcontext(None)
    return notices.listening(request_id)


def future(
    request: Request,
    op: Operation,
    model_id: str | None = None,
    waiter: notices.Waiter | None = None,
):
    """A submit's answer: the handle, followed by the outcome when the caller prefers to wait
    and may retrieve the future (else it gets the handle alone and polls, as tinker does).
    ``waiter``: from ``listening``, for ``op`` (a retry's earlier operation is not its).

    A streamed answer keeps the waiter past the view: its wait releases it, and so does the
    response's close (the client went away before the wait ended, or began)."""
    body = handle_body(op, model_id)
    wait = wait_preference(request)
    if wait is None or not accepts_json(request) or not _may_retrieve(request, op):
        return Response(body)
    if waiter is not None and waiter.request_id != op.pk:
        waiter = None  # a retry, answered with the operation it made before
    release = waiter.keep() if waiter is not None else None
    response = StreamingHttpResponse(
        _lines(op, body, wait, waiter, release), content_type=CONTENT_TYPE
    )
    if release is not None:
        response._resource_closers.append(release)
    response["Preference-Applied"] = f"wait={wait:g}"
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # a proxy in front passes each line as it comes
    return response


def _may_retrieve(request: Request, op: Operation) -> bool:
    """Whether the caller may retrieve the future it just created. Allowed, it is part of the
    submit this request already recorded in the audit log; refused, it is recorded too."""
    from controlplane.iam.access import check

    arn = session_arn(request.user.tenant, op.session_id)
    decision = check(
        request.user, "sessions:RetrieveFuture", arn, request=request, audit_allowed=False
    )
    return decision.allowed


def _lines(
    op: Operation,
    handle: dict,
    wait: float,
    waiter: notices.Waiter | None,
    release: Callable[[], None] | None,
) -> Iterator[bytes]:
    # Runs once the view has returned, so after the operation's commit: the handle goes out at
    # once, then the wait, outside any transaction.
    try:
        yield _line(handle)
        deadline = time.monotonic() + wait
        op = notices.wait_finished(op, deadline, waiter)
    finally:
        if release is not None:
            release()
    yield _line(finished_body(op)[0])


def _line(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"
