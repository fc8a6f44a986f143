"""A training session as the runtime names it (``controlplane.sagemaker_sessions``: its
``TrainingSessionName``, else its id) with the one model it trains. Missing, deleted and another
account's read the same (``ResourceNotFoundException``)."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.sagemaker_sessions.selectors import session_model, session_named
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.errors import NotFound
from controlplane.training_sessions.models import Session, TrainingModel

FIELD = "trainingSessionName"


@dataclass(frozen=True)
class TrainingSession:
    name: str
    session: Session
    model: TrainingModel

    @property
    def tenant(self) -> Tenant:
        return self.session.tenant


def not_found(name: str, field: str = FIELD) -> NotFound:
    return NotFound(f"Training session {name[:63]!r} does not exist in this account", field=field)


def training_session_get(*, tenant: Tenant, name: str) -> TrainingSession:
    """The tenant's training session ``name`` with its model."""
    session = session_named(tenant=tenant, name=name, field=FIELD)
    model = session_model(session)
    if model is None:
        raise not_found(name)
    return TrainingSession(name=name, session=session, model=model)
