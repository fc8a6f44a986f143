"""Sessions as tinker SDK 0.26–0.38 and SageMaker-style tools read them: a client's finish
reason (``sessions/<id>/finish``), the session's status, its search (``sessions/search``), its
billable tokens, the last ``seq_id`` it received and whether a missing one blocks it."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Count, Max, Sum

from controlplane.errors import DomainError
from controlplane.metering.models import Meter, UsageRecord
from controlplane.operations.session_end import session_stop
from controlplane.sagemaker_sessions.selectors import blocked_reason
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import (
    Checkpoint,
    Operation,
    Session,
    SessionFinish,
    TrainingModel,
)
from controlplane.training_sessions.queue_status import model_queue_status, summary
from controlplane.training_sessions.selectors import session_get

__all__ = [
    "PROJECT_ID",
    "sagemaker_json",
    "session_finish",
    "session_search",
    "session_status",
    "session_summary",
]

PROJECT_ID = "default"  # one project per account: what tinker's project fields name
MAX_DETAIL = 10_000


@transaction.atomic
def session_finish(*, tenant: Tenant, session_id: str, reason: str, detail: str) -> Session:
    """Record the client's finish reason (the first one stands) and stop the session: its
    models unload after the operations already queued."""
    session = session_get(tenant=tenant, session_id=session_id)
    if reason not in SessionFinish.Reason.values:
        raise DomainError(
            f"reason.type: one of {', '.join(SessionFinish.Reason.values)}", field="reason.type"
        )
    SessionFinish.objects.get_or_create(
        session=session, defaults={"reason": reason, "detail": detail[:MAX_DETAIL]}
    )
    return session_stop(tenant=tenant, session_id=session.id)


def session_status(session: Session) -> dict:
    """tinker's ``SessionStatus``: active, finished by its client (with the reason), failed,
    or cancelled (stopped or expired without a reason from the client)."""
    finish = SessionFinish.objects.filter(session=session).first()
    if finish is not None:
        return {
            "type": "client_finished",
            "reason": {"type": finish.reason},
            "detail": finish.detail or None,
        }
    if session.state == Session.State.FAILED:
        failed = session.models.filter(state=TrainingModel.State.FAILED).first()
        return {
            "type": "failed",
            "category": "internal",
            "reason": {"type": "training_run", "training_run_id": failed.id if failed else ""},
            "message": failed.status_reason if failed and failed.status_reason else "failed",
        }
    if session.state in (Session.State.STOPPED, Session.State.EXPIRED):
        return {"type": "cancelled", "detail": session.state}
    return {"type": "active"}


def _checkpoints(session: Session) -> dict:
    found = Checkpoint.objects.filter(model__session=session).aggregate(
        n=Count("id"), size=Sum("size_bytes")
    )
    return {"checkpoints_count": found["n"] or 0, "checkpoint_storage_bytes": found["size"]}


def session_summary(session: Session) -> dict:
    """tinker's ``SessionSummary``."""
    metadata = session.user_metadata or {}
    return {
        "session_id": session.id,
        "created_at": session.created_at.isoformat(),
        "owner": session.tenant.account_id,
        "project_id": PROJECT_ID,
        "status": session_status(session),
        "display_name": session.name or None,
        "user_metadata": {str(k): str(v) for k, v in metadata.items()} or None,
        **_checkpoints(session),
    }


def _matches(session: Session, query: dict) -> bool:
    by_id, name = query.get("session_id"), query.get("display_name")
    if by_id is not None or name is not None:
        named = name is not None and all(
            word in (session.name or "").lower() for word in name.lower().split()
        )
        if session.id != by_id and not named:
            return False
    metadata = session.user_metadata or {}
    if any(str(metadata.get(k)) != v for k, v in (query.get("user_metadata") or {}).items()):
        return False
    statuses = query.get("statuses")
    if statuses:
        status = session_status(session)
        return any(
            s["type"] == status["type"]
            and (not s.get("reasons") or status.get("reason", {}).get("type") in s["reasons"])
            for s in statuses
        )
    return True


def session_search(*, tenant: Tenant, query: dict) -> tuple[list[Session], dict | None]:
    """One page of the tenant's sessions that match ``query`` (tinker's
    ``SessionSearchRequest``), newest first, and the cursor of the next page."""
    projects = query.get("project_ids")
    if projects is not None and any(p != PROJECT_ID for p in projects):
        unknown = next(p for p in projects if p != PROJECT_ID)
        raise DomainError(f"project {unknown!r} not found", field="project_ids")
    found = Session.objects.filter(tenant=tenant).select_related("tenant")
    cursor = query.get("cursor")
    if cursor:
        last = datetime.fromisoformat(str(cursor["last_created_at"]))
        found = found.filter(created_at__lte=last).exclude(
            created_at=last, id__gte=cursor["last_session_id"]
        )
    limit = int(query.get("limit") or 50)
    page: list[Session] = []
    for session in found.order_by("-created_at", "-id").iterator(chunk_size=200):
        if _matches(session, query):
            page.append(session)
            if len(page) > limit:
                break
    more = len(page) > limit
    page = page[:limit]
    next_cursor = (
        {"last_created_at": page[-1].created_at.isoformat(), "last_session_id": page[-1].id}
        if more
        else None
    )
    return page, next_cursor


# -- the SageMaker-style view of a session ------------------------------------------------------
_STATUS = {
    Session.State.PENDING: "Pending",
    Session.State.ACTIVE: "InProgress",
    Session.State.STOPPING: "Stopping",
    Session.State.STOPPED: "Stopped",
    Session.State.EXPIRED: "Stopped",
    Session.State.FAILED: "Failed",
}


def _queued(session: Session) -> str | None:
    """Why the session's first waiting model waits, with its place in the placement queue."""
    waiting = session.models.filter(
        placement__in=TrainingModel.WAITING,
        worker__isnull=True,
        state__in=TrainingModel.LIVE_STATES,
    ).order_by("created_at")
    for model in waiting.select_related("session"):
        if (place := model_queue_status(model)) is not None:
            return summary(place)
    return None


def sagemaker_json(session: Session) -> dict:
    """Billable tokens by meter, the highest ``seq_id`` received, and the status, ``Blocked``
    (with the reason) while a missing ``seq_id`` holds the session's requests up, ``Pending``
    (with the reason, its place in line and likely start) while a model of it waits in the
    placement queue."""
    usage = dict(
        UsageRecord.objects.filter(session_id=session.id)
        .values_list("meter")
        .annotate(n=Sum("quantity"))
    )
    last = Operation.objects.filter(session=session, model__isnull=False).aggregate(
        m=Max("seq_id")
    )["m"]
    live = session.state not in Session.ENDED_STATES
    blocked = blocked_reason(session) if live else None
    pending = _queued(session) if live and not blocked else None
    status = "Blocked" if blocked else "Pending" if pending else None
    return {
        "TrainingSessionStatus": status or _STATUS.get(session.state, "InProgress"),
        "BlockedReason": blocked,
        "PendingReason": pending,
        "BillableTokenUsage": {
            "PrefillTokens": usage.get(Meter.PREFILL_TOKENS, 0),
            "SampleTokens": usage.get(Meter.SAMPLED_TOKENS, 0),
            "TrainingTokens": usage.get(Meter.TRAIN_TOKENS, 0),
            "ForwardTokens": usage.get(Meter.FORWARD_TOKENS, 0),
        },
        "LastReceivedSequenceNumber": last,
    }
