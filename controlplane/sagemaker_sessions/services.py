"""Writes of the SageMaker view of a session: create one (a session and its LoRA model, as the
Tinker API's create_session and create_model do), stop one, delete one. Callers authorize first;
the IAM decisions are the audit rows."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from controlplane.operations.session_end import session_stop
from controlplane.operations.training import model_create
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Session
from controlplane.training_sessions.services.sessions import session_create

from .errors import InvalidTransition, NameInUse
from .models import TrainingSessionRecord
from .selectors import SESSION_ID, record_of, status_of, visible

STOP_IS_DONE = ("Stopping", "Stopped", "Failed")
DELETABLE = ("Stopped", "Failed", "Expired")


@transaction.atomic
def training_session_create(
    *,
    tenant: Tenant,
    actor: str,
    name: str,
    base_model: str,
    lora: dict,
    platform: dict,
    tags: dict[str, str] | None,
    base_model_arn: str,
    output_path: str,
) -> Session:
    """A session named ``name`` (unique among the account's sessions the SageMaker API shows)
    training one LoRA model of ``base_model``; the model is placed on a worker after commit."""
    if SESSION_ID.fullmatch(name):
        raise NameInUse(
            f"TrainingSessionName: {name!r} has the form of a session id; choose another name",
            field="TrainingSessionName",
        )
    # the tenant's row, locked until commit: two creations of one name run one after the other
    Tenant.objects.select_for_update().only("pk").get(pk=tenant.pk)
    if visible(tenant=tenant).filter(name=name).exists():
        raise NameInUse(
            f"Training session {name!r} already exists in this account",
            field="TrainingSessionName",
        )
    session = session_create(
        tenant=tenant,
        name=name,
        tags=[],
        user_metadata=tags or None,
        sdk_version="sagemaker",
        platform=platform,
    )
    TrainingSessionRecord.objects.create(
        session=session,
        name=name,
        base_model_arn=base_model_arn[:2048],
        output_path=output_path[:1024],
        created_by=actor[:400],
    )
    model_create(
        tenant=tenant, session_id=session.id, model_seq_id=0, base_model=base_model, lora=lora
    )
    return session


def training_session_stop(*, tenant: Tenant, session: Session) -> Session:
    """Stop it: its model unloads after the operations already queued. Stopping one already on
    its way down is refused as the service refuses it; an expired one is already stopped."""
    status = status_of(session).name
    if status in STOP_IS_DONE:
        raise InvalidTransition(
            f"invalid session state transition from {status} to Stopping",
            field="TrainingSessionName",
        )
    if status == "Expired":
        return session
    return session_stop(tenant=tenant, session_id=session.id)


@transaction.atomic
def training_session_delete(*, tenant: Tenant, session: Session, actor: str) -> None:
    """Take an ended session out of the SageMaker API and free its name. The session itself,
    its checkpoints, model packages and usage stay."""
    session = Session.objects.select_for_update().get(pk=session.pk, tenant=tenant)
    status = status_of(session).name
    if status not in DELETABLE:
        raise InvalidTransition(
            f"invalid session state transition from {status} to Deleting: only a "
            f"{', '.join(DELETABLE)} session can be deleted; stop it first",
            field="TrainingSessionName",
        )
    record = record_of(session) or TrainingSessionRecord(session=session)
    record.deleted_at = timezone.now()
    record.deleted_by = actor[:400]
    record.save()
