"""What the one-statement submits (``step_statement``, ``sample_statement``) share: the
operation's column values as the statement binds them, and the rows it wrote taken as saved."""

from __future__ import annotations

from collections.abc import Container

from django.db import connection

from controlplane import dispatch
from controlplane.audit.models import AuditEvent
from controlplane.fleet.models import Worker
from controlplane.training_sessions.models import Operation


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
