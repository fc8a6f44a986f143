"""A training step's submit as one statement, for the requests that make up a training loop
(forward, forward_backward, optim_step with their next ``seq_id``, on PostgreSQL); taken by
``training.submit_step`` where it applies.

The statement locks the model's row, checks everything ``training.training_submit`` checks before
it inserts (the model and its session take operations, the ``seq_id`` is not behind the model
and not taken), inserts the operation (whose trigger wakes the worker), writes the request's
audit row and the signs of life, and commits on its own: one round trip and one disk flush. It
either does all of that or nothing at all; then the caller takes the general path, which
finds and reports whatever stopped it (or answers a retry with its operation), exactly as if
this had not been tried.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache

from django.conf import settings
from django.db import connection
from django.utils import timezone

from controlplane import row_mapper
from controlplane.audit.models import AuditEvent
from controlplane.fleet.models import BaseModel, Worker
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, Session, TrainingModel

from .admission import OPEN_STATES, TOUCH_SECONDS, digest, retry_key
from .statement_rows import (
    READY_STATES,
    insert_sql,
    inserted,
    new_operation,
    operation_values,
    written_with_operation,
)
from .statement_rows import available as available  # this path's switch: callers ask it here

# what the statement fills in from the model's row rather than from a value
_FROM_MODEL = {
    "session": "m.session_id",
    "model": "m.id",
    "worker": "m.worker_id",
    "plan": "jsonb_build_object('adapter', m.id, 'base_model', m.base_model)",
}


def submit(
    *,
    tenant: Tenant,
    model_id: str,
    seq_id: int,
    kind: str,
    payload: dict,
    audit: AuditEvent,
    request_id: str | None = None,
    highest_token: int | None = None,
    optimizer: str | None = None,
    longest_input: int = 0,
) -> Operation | None:
    """The operation, inserted and committed with ``audit``; None when the statement changed
    nothing (a missing or stopped model, a ``seq_id`` behind it or already used, also by a
    concurrent request whose insert the lock waited for, an optim_step whose ``optimizer``
    family is not the model's, a datum longer than the model's context, ``longest_input``
    tokens): the general path then says why."""
    now = timezone.now()
    op = new_operation(
        tenant=tenant,
        kind=kind,
        seq_id=seq_id,
        payload=payload,
        payload_digest=digest(retry_key(kind, payload)),
        audit=audit,
        request_id=request_id,
        now=now,
    )
    stale = now - timedelta(seconds=TOUCH_SECONDS)
    outcome = written_with_operation(audit)
    tenant_id = TrainingModel._meta.get_field("tenant").get_db_prep_value(tenant.pk, connection)
    params = [
        tenant_id,
        model_id,
        *READY_STATES,
        *OPEN_STATES,
        seq_id,
        seq_id,
        settings.SEQ_WINDOW,
        -1 if highest_token is None else highest_token,
        longest_input,
        optimizer,
        seq_id,
        *operation_values(op, _FROM_MODEL),
        *row_mapper.insert_values(audit),
        now,
        stale,
        now,
        stale,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_statement(), params)
        row = cursor.fetchone()
    if row is None:
        audit.outcome = outcome  # not written: the general path writes it as it would have
        return None
    session_id, worker_id, queue, base_model = row
    op.session_id, op.model_id, op.worker_id = session_id, model_id, worker_id
    op.plan = {"adapter": model_id, "base_model": base_model}  # as the statement wrote it
    return inserted(op, audit, worker_id, queue)


@cache
def _statement() -> str:
    q = connection.ops.quote_name
    ops, models = q(Operation._meta.db_table), q(TrainingModel._meta.db_table)
    sessions, workers = q(Session._meta.db_table), q(Worker._meta.db_table)
    base_models = q(BaseModel._meta.db_table)
    columns, values, audit_values = insert_sql(_FROM_MODEL)
    return f"""
        WITH m AS (
            SELECT m.id, m.session_id, m.worker_id, m.base_model, m.last_request_at,
                   s.last_heartbeat_at
            FROM {models} m JOIN {sessions} s ON s.id = m.session_id
            LEFT JOIN {base_models} b ON b.name = m.base_model
            WHERE m.tenant_id = %s AND m.id = %s AND m.state IN (%s, %s)
              AND s.state IN (%s, %s) AND m.next_seq <= %s AND %s < m.next_seq + %s
              AND (b.vocab_size IS NULL OR %s < b.vocab_size)
              AND (m.context_length IS NULL OR %s <= m.context_length)
              AND COALESCE(%s::text, m.lora ->> 'optimizer', 'adamw')
                  = COALESCE(m.lora ->> 'optimizer', 'adamw')
              AND NOT EXISTS (SELECT 1 FROM {ops} e WHERE e.model_id = m.id AND e.seq_id = %s)
            FOR UPDATE OF m
        ), op AS (
            INSERT INTO {ops} ({columns}) SELECT {values} FROM m
            ON CONFLICT DO NOTHING  -- its seq_id, inserted meanwhile by a concurrent request
            RETURNING session_id, worker_id
        ), audit AS (
            INSERT INTO {row_mapper.insert_columns(AuditEvent)} SELECT {audit_values} FROM op
        ), touched AS (
            UPDATE {models} t SET last_request_at = %s FROM m, op
            WHERE t.id = m.id AND m.last_request_at < %s
        ), beat AS (
            UPDATE {sessions} t SET last_heartbeat_at = %s FROM m, op
            WHERE t.id = m.session_id
              AND (m.last_heartbeat_at IS NULL OR m.last_heartbeat_at < %s)
        )
        SELECT op.session_id, op.worker_id, w.queue, m.base_model
        FROM op CROSS JOIN m LEFT JOIN {workers} w ON w.id = op.worker_id
    """  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
