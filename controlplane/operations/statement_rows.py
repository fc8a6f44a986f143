"""What the one-statement submits (``step_statement``, ``sample_statement``) share: when they
can be taken, the operation they insert and its column values as the statement binds them, the
audit row written with it, and the rows the statement wrote taken as saved."""

from __future__ import annotations

from collections.abc import Container
from datetime import datetime

from django.db import connection

from controlplane import dispatch
from controlplane.audit.models import AuditEvent
from controlplane.fleet.models import Worker
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, TrainingModel, new_id

# the states of a model the statements submit to
READY_STATES = (TrainingModel.State.CREATING, TrainingModel.State.READY)


def available() -> bool:
    """Whether a one-statement submit can be taken here: PostgreSQL, outside any transaction
    (the statement commits by itself)."""
    return connection.vendor == "postgresql" and not connection.in_atomic_block


def new_operation(
    *,
    tenant: Tenant,
    kind: str,
    seq_id: int | None,
    payload: dict,
    payload_digest: str,
    audit: AuditEvent,
    request_id: str | None,
    now: datetime,
) -> Operation:
    """The operation a statement inserts, as far as the request says it (the statement fills in
    its session, model or sampler, worker and plan)."""
    return Operation(
        id=request_id or new_id("req"),
        tenant=tenant,
        seq_id=seq_id,
        kind=kind,
        payload=payload,
        payload_digest=payload_digest,
        created_at=now,
        api_key=audit.api_key,  # the key whose request it is
    )


def written_with_operation(audit: AuditEvent) -> object:
    """``audit`` as the statement writes it with the operation (an allowed change succeeded);
    returns its outcome before, for the caller to put back if the statement wrote nothing (the
    general path then writes it as it would have)."""
    outcome = audit.outcome
    if audit.allowed and audit.mutating:
        audit.outcome = AuditEvent.Outcome.SUCCEEDED
    return outcome


def insert_sql(filled_by_statement: dict[str, str]) -> tuple[str, str, str]:
    """The operation's columns and the values a statement inserts them from (its parameters,
    cast to each column's type, or the SQL that ``filled_by_statement`` names for a field),
    and the audit row's values, every one a parameter."""
    fields = Operation._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = ", ".join(filled_by_statement.get(f.name) or _param(f) for f in fields)
    audit_fields = [f for f in AuditEvent._meta.concrete_fields if not f.primary_key]
    return columns, values, ", ".join(_param(f) for f in audit_fields)


def _param(field) -> str:
    return f"%s::{field.cast_db_type(connection)}"


def operation_values(op: Operation, filled_by_statement: Container[str]) -> list:
    """``op``'s column values in field order, less the fields the statement fills in itself."""
    return [
        f.get_db_prep_save(f.pre_save(op, True), connection)
        for f in Operation._meta.concrete_fields
        if f.name not in filled_by_statement
    ]


def inserted(op: Operation, audit: AuditEvent, worker_id: object, queue: str | None) -> Operation:
    """``op`` and ``audit`` as rows the statement inserted (saved, on this connection), with
    the worker it placed ``op`` on, woken through the broker where the database's own notice
    does not (the insert's trigger wakes it on PostgreSQL)."""
    if worker_id is not None:
        op.worker = Worker(id=worker_id, queue=queue)
    op._state.adding = False
    op._state.db = connection.alias
    audit._state.adding = False
    if op.worker is not None:
        dispatch.wake_worker(op.worker.queue, inserted=True)
    return op
