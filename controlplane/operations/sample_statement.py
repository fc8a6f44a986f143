"""A sample's submit as one statement, on PostgreSQL, for the requests a sampling loop sends
(a token prompt with its ``max_tokens``, no ``Idempotency-Key``, no recorded stability info, a
tenant without hard budgets, a sampler on a live model or its base model); taken by
``sampling.submit`` where it applies.

The statement checks everything ``sampling.sample_submit`` checks on such a request before it
inserts (the sampler is the tenant's, its session takes operations, its live model too, the
prompt, stop and ``logit_bias`` token ids are inside the base model's vocabulary, the prompt
and ``max_tokens`` fit the sampler's context, the ``seq_id`` is not taken), inserts the
operation (whose trigger wakes the worker), writes the request's audit row and the session's
sign of life, and commits on its own: one round trip and one disk flush. It either does all of
that or nothing at all; then the caller takes the general path, which finds and reports
whatever stopped it (or answers a retry with its operation), exactly as if this had not been
tried.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache

from django.db import connection
from django.utils import timezone

from controlplane import row_mapper
from controlplane.audit.models import AuditEvent
from controlplane.fleet.models import BaseModel, Worker
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import (
    Operation,
    SamplingSession,
    Session,
    TrainingModel,
)

from .admission import OPEN_STATES, TOUCH_SECONDS
from .statement_rows import (
    READY_STATES,
    insert_sql,
    inserted,
    new_operation,
    operation_values,
    written_with_operation,
)
from .statement_rows import available as available  # this path's switch: callers ask it here

# what the statement fills in from the sampler's row rather than from a value
_FROM_SAMPLER = {
    "session": "ss.session_id",
    "sampling_session": "ss.id",
    "worker": "ss.worker_id",
    "plan": "jsonb_build_object('base_model', ss.base_model, 'adapter', ss.live_model_id)",
}


def submit(
    *,
    tenant: Tenant,
    sampling_session_id: str,
    seq_id: int | None,
    payload: dict,
    payload_digest: str,
    audit: AuditEvent,
    highest_token: int | None,
    needs_context: int,
    request_id: str | None = None,
) -> Operation | None:
    """The sample operation, inserted and committed with ``audit``; None when the statement
    changed nothing (a missing sampler or one of another tenant, a stopped session or model, a
    sampler on saved weights, a token id past the vocabulary (``highest_token``), a prompt and
    ``max_tokens`` past the sampler's context (``needs_context`` tokens), a ``seq_id`` already
    used, also by a concurrent request): the general path then says why."""
    now = timezone.now()
    op = new_operation(
        tenant=tenant,
        kind=Operation.Kind.SAMPLE,
        seq_id=seq_id,
        payload=payload,
        payload_digest=payload_digest,
        audit=audit,
        request_id=request_id,
        now=now,
    )
    outcome = written_with_operation(audit)
    tenant_id = SamplingSession._meta.get_field("tenant").get_db_prep_value(tenant.pk, connection)
    params = [
        tenant_id,
        sampling_session_id,
        *OPEN_STATES,
        *READY_STATES,
        *OPEN_STATES,
        -1 if highest_token is None else highest_token,
        needs_context,
        seq_id,
        *operation_values(op, _FROM_SAMPLER),
        *row_mapper.insert_values(audit),
        now,
        now - timedelta(seconds=TOUCH_SECONDS),
    ]
    with connection.cursor() as cursor:
        cursor.execute(_statement(), params)
        row = cursor.fetchone()
    if row is None:
        audit.outcome = outcome  # not written: the general path writes it as it would have
        return None
    session_id, worker_id, queue, base_model, live_model_id = row
    op.session_id, op.sampling_session_id, op.worker_id = session_id, sampling_session_id, worker_id
    op.plan = {"base_model": base_model, "adapter": live_model_id}  # as the statement wrote it
    return inserted(op, audit, worker_id, queue)


@cache
def _statement() -> str:
    q = connection.ops.quote_name
    ops, samplers = q(Operation._meta.db_table), q(SamplingSession._meta.db_table)
    models, sessions = q(TrainingModel._meta.db_table), q(Session._meta.db_table)
    workers, base_models = q(Worker._meta.db_table), q(BaseModel._meta.db_table)
    columns, values, audit_values = insert_sql(_FROM_SAMPLER)
    return f"""
        WITH ss AS (
            SELECT ss.id, ss.session_id, ss.worker_id, ss.base_model, ss.live_model_id,
                   s.last_heartbeat_at
            FROM {samplers} ss JOIN {sessions} s ON s.id = ss.session_id
            LEFT JOIN {models} m ON m.id = ss.live_model_id
            LEFT JOIN {sessions} ms ON ms.id = m.session_id
            LEFT JOIN {base_models} b ON b.name = ss.base_model
            WHERE ss.tenant_id = %s AND ss.id = %s AND s.state IN (%s, %s)
              AND (ss.live_model_id IS NULL
                   OR (m.state IN (%s, %s) AND ms.state IN (%s, %s)))
              AND (ss.live_model_id IS NOT NULL OR ss.storage_path = '')
              AND (b.vocab_size IS NULL OR %s < b.vocab_size)
              AND (ss.context_length IS NULL OR %s <= ss.context_length)
              AND NOT EXISTS (
                  SELECT 1 FROM {ops} e WHERE e.sampling_session_id = ss.id AND e.seq_id = %s
              )
        ), op AS (
            INSERT INTO {ops} ({columns}) SELECT {values} FROM ss
            ON CONFLICT DO NOTHING  -- its seq_id, inserted meanwhile by a concurrent request
            RETURNING session_id, worker_id
        ), audit AS (
            INSERT INTO {row_mapper.insert_columns(AuditEvent)} SELECT {audit_values} FROM op
        ), beat AS (
            UPDATE {sessions} t SET last_heartbeat_at = %s FROM ss, op
            WHERE t.id = ss.session_id
              AND (ss.last_heartbeat_at IS NULL OR ss.last_heartbeat_at < %s)
        )
        SELECT op.session_id, op.worker_id, w.queue, ss.base_model, ss.live_model_id
        FROM op CROSS JOIN ss LEFT JOIN {workers} w ON w.id = op.worker_id
    """  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
