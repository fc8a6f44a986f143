"""Ending a session: its live models are unloaded after the operations already queued (each an
unload operation in its ``seq_id`` order), its recorded sampled sequences are deleted, then the
session is over; idle sessions expire so."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Session, TrainingModel
from controlplane.training_sessions.selectors import session_get
from controlplane.training_sessions.services.recordings import recordings_end_session

from .training import model_unload


@transaction.atomic
def session_stop(
    *, tenant: Tenant, session_id: str, final_state: str = Session.State.STOPPED
) -> Session:
    """Unload every live model (after the operations already queued), then the session is over."""
    session = Session.objects.select_for_update().get(
        pk=session_get(tenant=tenant, session_id=session_id).pk
    )
    if session.state in (Session.State.STOPPED, Session.State.EXPIRED, Session.State.FAILED):
        return session
    live = list(
        session.models.filter(state__in=(TrainingModel.State.CREATING, TrainingModel.State.READY))
    )
    for model in live:
        model_unload(tenant=tenant, model=model, ending=True)
    ending_models = session.models.filter(state__in=TrainingModel.LIVE_STATES).exists()
    session.state = (
        Session.State.STOPPING
        if ending_models and final_state == Session.State.STOPPED
        else final_state
    )
    session.ended_at = timezone.now()
    session.save(update_fields=["state", "ended_at"])
    recordings_end_session(session.id)  # nothing can cite them any more
    return session


def sessions_expire_idle(*, now=None) -> list[str]:
    """Expire sessions without a heartbeat for SESSION_IDLE_TIMEOUT_SECONDS; unload their models."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.SESSION_IDLE_TIMEOUT_SECONDS)
    idle = Session.objects.filter(
        state__in=(Session.State.PENDING, Session.State.ACTIVE), last_heartbeat_at__lt=cutoff
    ).select_related("tenant")
    expired = []
    for session in idle:
        session_stop(
            tenant=session.tenant, session_id=session.id, final_state=Session.State.EXPIRED
        )
        expired.append(session.id)
    return expired
