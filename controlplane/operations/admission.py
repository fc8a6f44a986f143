"""What every submit checks and does alike: the session and model take operations, the request's
digest, and the idempotent insert (a retry gets its row back, another body with the same key is a
409) that wakes the worker after commit."""

from __future__ import annotations

import hashlib
import json

from django.db import IntegrityError, transaction

from controlplane import dispatch
from controlplane.training_sessions.errors import Conflict, NotActive
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from controlplane.training_sessions.services.provenance import RECORDED_KEY

OPEN_STATES = (Session.State.PENDING, Session.State.ACTIVE)
TOUCH_SECONDS = 5.0
# operations that consume metered tokens, refused once the tenant's monthly budget is used up
TOKEN_KINDS = frozenset({Operation.Kind.FORWARD, Operation.Kind.FORWARD_BACKWARD})


def digest(payload: dict) -> str:
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def retry_key(kind: str, payload: dict) -> dict:
    """What a retry of the request repeats: its payload but what the service added to it (what
    a training request took from the recorded sequences it cites, ``provenance``). The tinker
    SDK draws a new sampler number for each attempt of an ephemeral sampler save
    (``sampling_session_seq_id``): the seq_id and the rest of the request say it is the same
    save, which keeps the number its first attempt took."""
    if RECORDED_KEY in payload:
        payload = {k: v for k, v in payload.items() if k != RECORDED_KEY}
    if kind == Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER and payload.get("path") is None:
        return {k: v for k, v in payload.items() if k != "sampling_session_seq_id"}
    return payload


def require_open(session: Session) -> None:
    if session.state not in OPEN_STATES:
        raise NotActive(
            f"session {session.id} is {session.state}; it takes no more operations",
            field="session_id",
        )


def require_ready(model: TrainingModel) -> None:
    require_open(model.session)
    if model.state not in (TrainingModel.State.CREATING, TrainingModel.State.READY):
        raise NotActive(
            f"model {model.id} is {model.state}; it takes no more operations", field="model_id"
        )


def existing_or_conflict(existing: Operation, payload_digest: str, what: str) -> Operation:
    if existing.payload_digest != payload_digest:
        raise Conflict(
            f"{what} was already used by a different request ({existing.id})", field="seq_id"
        )
    return existing


def create_op(
    lookup: dict, what: str, *, existing: Operation | None = None, checked: bool = False, **fields
) -> Operation:
    """Insert the row, or return the identical one a retry already inserted."""
    if not checked:
        existing = Operation.objects.filter(**lookup).first()
    if existing is not None:
        return existing_or_conflict(existing, fields["payload_digest"], what)
    try:
        with transaction.atomic():
            op = Operation.objects.create(**lookup, **fields)
    except IntegrityError:
        return existing_or_conflict(Operation.objects.get(**lookup), fields["payload_digest"], what)
    if op.worker is not None and op.status == Operation.Status.PENDING:
        # else it waits with its model, and goes when the model is placed
        dispatch.wake_worker(op.worker.queue, inserted=True)
    return op
