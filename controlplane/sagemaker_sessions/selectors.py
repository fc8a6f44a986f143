"""Training sessions as the SageMaker API names and reports them, always within one tenant: a
session is named by the ``TrainingSessionName`` it was created with or by its id (what the last
segment of its ARN says); another tenant's, a deleted one and a missing one are not found alike.

Status: ``Created`` (its model is being made), ``Scheduled`` (waiting in the placement queue,
with why, its place in line and its likely start), ``Running``, ``Blocked`` (a ``seq_id`` it
must run next has not arrived while later ones wait, with why), ``Stopping``, ``Stopped``,
``Failed`` (with why), ``Expired`` (idle too long).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Max, Min, QuerySet, Sum

from controlplane.errors import NotFound
from controlplane.iam.resources import session_arn
from controlplane.metering.models import Meter, UsageRecord
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from controlplane.training_sessions.queue_status import model_queue_status, summary
from controlplane.training_sessions.selectors import failure_reasons

from .models import TrainingSessionRecord

SESSION_ID = re.compile(r"sess-[0-9a-f]{24}")
SESSION_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
ENDED = {
    Session.State.STOPPING: "Stopping",
    Session.State.STOPPED: "Stopped",
    Session.State.FAILED: "Failed",
    Session.State.EXPIRED: "Expired",
}
MAX_ERROR_DETAILS = 1024  # FailureReason's bound in the service model


def visible(*, tenant: Tenant) -> QuerySet[Session]:
    """The tenant's sessions the SageMaker API shows: every one not deleted through it."""
    return (
        Session.objects.filter(tenant=tenant)
        .exclude(sagemaker__deleted_at__isnull=False)
        .select_related("tenant", "sagemaker")
    )


def session_named(*, tenant: Tenant, name: str, field: str = "TrainingSessionName") -> Session:
    """The session ``name`` names (its SageMaker name, else its id); ``NotFound`` alike for a
    missing, deleted or another tenant's session."""
    found = None
    if isinstance(name, str) and SESSION_ID.fullmatch(name):
        found = visible(tenant=tenant).filter(id=name).first()
    elif isinstance(name, str) and SESSION_NAME.fullmatch(name):
        found = visible(tenant=tenant).filter(name=name).order_by("-created_at", "-id").first()
    if found is None:
        raise NotFound(
            f"Training session {str(name)[:63]!r} does not exist in this account", field=field
        )
    return found


def record_of(session: Session) -> TrainingSessionRecord | None:
    try:
        return session.sagemaker
    except TrainingSessionRecord.DoesNotExist:
        return None


def display_name(session: Session) -> str:
    """The ``TrainingSessionName`` it answers to: the one it was created with (a name that is
    no valid SageMaker name, or none: its id)."""
    if session.name and SESSION_NAME.fullmatch(session.name):
        return session.name
    return session.id


def arn_of(session: Session) -> str:
    return session_arn(session.tenant, session.id)


def session_model(session: Session) -> TrainingModel | None:
    """The model a SageMaker session trains: its first (the one CreateTrainingSession made)."""
    return session.models.order_by("model_seq_id", "created_at").first()


@dataclass(frozen=True)
class Status:
    name: str
    details: str | None = None


def status_of(session: Session, model: TrainingModel | None = None) -> Status:
    """The session's ``TrainingSessionStatus`` and its ``ErrorDetails``."""
    if session.state in ENDED:
        details = None
        if session.state == Session.State.FAILED:
            details = failure_reasons(tenant=session.tenant, sessions=[session]).get(session.id)
        return Status(ENDED[session.state], _cut(details))
    blocked = blocked_reason(session)
    if blocked:
        return Status("Blocked", _cut(blocked))
    model = model or session_model(session)
    if model is None:
        return Status("Created")
    if model.state == TrainingModel.State.READY:
        return Status("Running")
    if model.state == TrainingModel.State.FAILED:
        return Status("Failed", _cut(model.status_reason or "its model could not be created"))
    if model.placement in TrainingModel.WAITING:
        queued = model_queue_status(model)
        return Status("Scheduled", _cut(summary(queued) if queued else model.status_reason or None))
    return Status("Created")


def _cut(text: str | None) -> str | None:
    return text[:MAX_ERROR_DETAILS] if text else None


def blocked_reason(session: Session) -> str | None:
    """Why a live model of the session cannot go on: the ``seq_id`` it must run next has not
    arrived while later ones wait."""
    live = session.models.filter(state__in=TrainingModel.LIVE_STATES)
    for model in live.order_by("created_at"):
        waiting = Operation.objects.filter(
            model=model, status=Operation.Status.PENDING, seq_id__gt=model.next_seq
        ).aggregate(n=Count("id"), first=Min("seq_id"))
        if (
            not waiting["n"]
            or Operation.objects.filter(model=model, seq_id=model.next_seq).exists()
        ):
            continue
        return (
            f"model {model.id} waits for seq_id {model.next_seq}, which has not arrived; "
            f"{waiting['n']} later request(s) from seq_id {waiting['first']} wait behind it. "
            "Send it (a retry of the same request is safe); after "
            f"{settings.SEQ_GAP_SECONDS:g} s it is recorded as missing and the rest run"
        )
    return None


def usage_by_meter(session: Session) -> dict[str, int]:
    return dict(
        UsageRecord.objects.filter(session_id=session.id)
        .values_list("meter")
        .annotate(n=Sum("quantity"))
    )


def billable_usage(session: Session) -> dict[str, int]:
    """``BillableTokenUsage``: prompts sampled from, tokens sampled, and tokens trained on
    (``forward`` and ``forward_backward`` alike), as metered."""
    usage = usage_by_meter(session)
    return {
        "PrefillTokenCount": usage.get(Meter.PREFILL_TOKENS, 0),
        "SampleTokenCount": usage.get(Meter.SAMPLED_TOKENS, 0),
        "TrainingTokenCount": usage.get(Meter.TRAIN_TOKENS, 0) + usage.get(Meter.FORWARD_TOKENS, 0),
    }


def last_sequence_number(session: Session) -> int | None:
    """The highest ``seq_id`` received for the session's models (None before the first)."""
    last = Operation.objects.filter(session=session, model__isnull=False, seq_id__gt=0).aggregate(
        m=Max("seq_id")
    )["m"]
    return last
