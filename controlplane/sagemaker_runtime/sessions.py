"""A training session as the runtime names it: the caller's session of that name and the one
model it trains. Missing and another account's read the same (``ResourceNotFoundException``)."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.tenants.models import Tenant
from controlplane.training_sessions.errors import NotFound
from controlplane.training_sessions.models import Session, TrainingModel


@dataclass(frozen=True)
class TrainingSession:
    name: str
    session: Session
    model: TrainingModel

    @property
    def tenant(self) -> Tenant:
        return self.session.tenant


def not_found(name: str) -> NotFound:
    return NotFound(
        f"training session {name[:64]!r} not found in this account", field="trainingSessionName"
    )


def training_session_get(*, tenant: Tenant, name: str) -> TrainingSession:
    """The tenant's training session ``name`` with its model (its first: the session's own)."""
    session = (
        Session.objects.select_related("tenant")
        .filter(tenant=tenant, name=name)
        .order_by("-created_at")
        .first()
    )
    model = None
    if session is not None:
        model = (
            TrainingModel.objects.select_related("worker")
            .filter(session=session)
            .order_by("model_seq_id")
            .first()
        )
    if model is None:
        raise not_found(name)
    return TrainingSession(name=name, session=session, model=model)
