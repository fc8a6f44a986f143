"""Client sessions: create, heartbeat, list, describe, stop."""

from __future__ import annotations

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.audit.services import audited_transaction
from controlplane.edge.callers import allow, principal_of, tenant_of
from controlplane.errors import DomainError
from controlplane.iam.resources import session_arn
from controlplane.iam.sessions import session_role
from controlplane.kms.selectors import key_resolve
from controlplane.operations.session_end import session_stop as session_end
from controlplane.training_sessions import selectors
from controlplane.training_sessions.models import Recovery, Session, TrainingModel
from controlplane.training_sessions.queue_status import sampler_queue_status
from controlplane.training_sessions.services import sessions as services
from loopwright.types import CreateSessionRequest, CreateSessionResponse, SessionHeartbeatRequest

from .. import bodies, session_reports
from ..operation_responses import queue_json
from ..parsing import body_object, body_of, parse, query_int, text
from ..session_queries import SessionSearchQuery
from .models import placement_json


def session_json(s: Session) -> dict:
    # read once: the ids and the placement come from the same rows (a model created between
    # two reads would be placed and queued, yet missing from model_ids)
    held = list(s.models.select_related("worker", "session").order_by("created_at"))
    models = [m.id for m in held]
    samplers = list(s.sampling_sessions.order_by("created_at").values_list("id", flat=True))
    return {
        "session_id": s.id,
        "name": s.name,
        "state": s.state,
        # why a failed session failed: the error of the model that could not be created
        "failure": selectors.failure_reasons(tenant=s.tenant, sessions=[s]).get(s.id) or None,
        "created_at": s.created_at.isoformat(),
        "last_heartbeat_at": s.last_heartbeat_at.isoformat() if s.last_heartbeat_at else None,
        "ended_at": s.ended_at.isoformat() if s.ended_at else None,
        "model_ids": models,
        "sampling_session_ids": samplers,
        "tags": s.tags,
        "user_metadata": s.user_metadata,
        "platform": s.platform,
        # the official SDK's GetSessionResponse
        "training_run_ids": models,
        "sampler_ids": samplers,
        **session_placement_json(s, held),
        "recoveries": [recovery_json(r) for r in selectors.session_recoveries(s)],
    }


def recovery_json(r: Recovery) -> dict:
    """One failover of a model: which worker was lost, how and when it was noticed, where the
    model went, what it resumed from, what it replayed and how long it took."""
    return {
        "model_id": r.model_id,
        "cause": r.cause,
        "from_worker": r.from_worker,
        "to_worker": r.to_worker or None,
        "declared_at": r.declared_at.isoformat(),
        "declared_by": r.declared_by,
        "operations_requeued": r.requeued,
        "recovery_point": (
            None
            if r.recovery_kind in ("", "start") and r.recovery_seq is None
            else {"seq_id": r.recovery_seq, "kind": r.recovery_kind}
        ),
        "operations_replayed": r.replayed,
        "restored_at": r.restored_at.isoformat() if r.restored_at else None,
        "seconds_to_recover": r.seconds,
        "outcome": r.outcome,
        "error": r.error or None,
    }


def session_placement_json(s: Session, models: list[TrainingModel]) -> dict:
    """Where the session's ``models`` (its models, oldest first) run; a live one that waits for
    a worker says why and where it stands in the placement queue, as does a sampler that
    waits."""
    live = [m for m in models if m.state in TrainingModel.LIVE_STATES]
    waiting = next((m for m in live if m.placement in TrainingModel.WAITING), None)
    shown = waiting or (live or models or [None])[-1]  # else the newest live, else the newest
    placed = [{"model_id": m.id, "state": m.state, **placement_json(m)} for m in models]
    samplers = [
        {"sampler_id": sampler.id, "queue": queue_json(status)}
        for sampler in s.sampling_sessions.filter(worker__isnull=True, live_model__isnull=True)
        .select_related("session")
        .order_by("created_at")
        if (status := sampler_queue_status(sampler)) is not None
    ]
    first = next((m["queue"] for m in placed if m["queue"]), None)
    return {
        "placement": shown.placement if shown else None,
        "status_reason": shown.status_reason if shown else "",
        "queue": first or (samplers[0]["queue"] if samplers else None),
        "models": placed,
        "queued_samplers": samplers,
    }


@api_view(["POST"])
def create_session(request: Request) -> Response:
    req = parse(request, CreateSessionRequest)
    tenant = tenant_of(request)
    allow(request, "sessions:CreateTrainingSession", session_arn(tenant, "*"))
    role = session_role(principal_of(request), req.role_arn, request=request)
    if req.kms_key_arn:
        key = key_resolve(tenant=tenant, ref=req.kms_key_arn, field="kms_key_arn")
        allow(request, "kms:DescribeKey", key.arn)
    platform = {k: getattr(req, k) for k in services.PLATFORM_FIELDS} | {"role_arn": role.arn}
    session = services.session_create(
        tenant=tenant,
        name=req.name or req.display_name or "",
        tags=req.tags,
        user_metadata=req.user_metadata,
        sdk_version=req.sdk_version,
        platform=platform,
    )
    return Response(CreateSessionResponse(session_id=session.id).model_dump(mode="json"))


@api_view(["POST"])
def session_heartbeat(request: Request) -> Response:
    req = parse(request, SessionHeartbeatRequest)
    allow(
        request, "sessions:DescribeTrainingSession", session_arn(tenant_of(request), req.session_id)
    )
    services.session_heartbeat(tenant=tenant_of(request), session_id=req.session_id)
    return Response({"type": "session_heartbeat"})


@api_view(["GET"])
def session_list(request: Request) -> Response:
    allow(request, "sessions:ListTrainingSessions")
    found = selectors.session_list(
        tenant=tenant_of(request),
        limit=query_int(request, "limit", 100, 1, 1000),
        offset=query_int(request, "offset", 0, 0, 2**31),
    )
    # ``sessions`` (ids) is what the official SDK reads; ``session_infos`` has the details.
    return Response(
        {"sessions": [s.id for s in found], "session_infos": [session_json(s) for s in found]}
    )


@api_view(["GET"])
def session_detail(request: Request, session_id: str) -> Response:
    allow(request, "sessions:DescribeTrainingSession", session_arn(tenant_of(request), session_id))
    session = selectors.session_get(tenant=tenant_of(request), session_id=session_id)
    return Response({**session_json(session), **session_reports.sagemaker_json(session)})


@api_view(["POST"])
def session_finish(request: Request, session_id: str) -> Response:
    """The client is done (tinker SDK >= 0.26 ``ServiceClient.close(status, detail)``): its
    reason is kept (the first one given stands) and the session stops."""
    body = body_of(request, bodies.SessionFinishBody)
    reason = body.get("reason")
    if not isinstance(reason, dict) or not isinstance(reason.get("type"), str):
        raise DomainError("reason: an object with a type", field="reason")
    detail = text(body, "detail", session_reports.MAX_DETAIL, required=False)
    allow(request, "sessions:StopTrainingSession", session_arn(tenant_of(request), session_id))
    with audited_transaction():
        session = session_reports.session_finish(
            tenant=tenant_of(request), session_id=session_id, reason=reason["type"], detail=detail
        )
    return Response(session_reports.session_summary(session))


@api_view(["POST"])
def session_search(request: Request) -> Response:
    """tinker's ``sessions/search`` (SDK 0.38): the account's sessions, newest first, a page
    at a time. Every session of the account is the caller's own (``owner`` is either)."""
    query = SessionSearchQuery.model_validate(body_object(request))
    allow(request, "sessions:ListTrainingSessions")
    page, cursor = session_reports.session_search(
        tenant=tenant_of(request), query=query.model_dump(mode="json")
    )
    return Response(
        {"sessions": [session_reports.session_summary(s) for s in page], "next_cursor": cursor}
    )


@api_view(["POST"])
def session_stop(request: Request, session_id: str) -> Response:
    allow(request, "sessions:StopTrainingSession", session_arn(tenant_of(request), session_id))
    return Response(session_json(session_end(tenant=tenant_of(request), session_id=session_id)))
