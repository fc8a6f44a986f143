"""Writes to the audit log (never updated, pruned by age)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane import row_mapper
from controlplane.tenants.models import Tenant

from . import outcomes
from .models import AuditEvent


def audit_event(
    *,
    tenant: Tenant,
    principal: str,
    action: str,
    resource: str,
    allowed: bool,
    effect: str,
    mutating: bool,
    policy: str | None = None,
    statement: str | None = None,
    reason: str = "",
    source_ip: str | None = None,
    user_agent: str = "",
    api_key: str = "",
    outcome: str = "",
    error: str = "",
) -> AuditEvent:
    """An audit row, not yet written (``audit_record`` writes one; the hot submit path writes it
    in the statement that inserts the operation)."""
    return AuditEvent(
        tenant=tenant,
        principal=principal[:400],
        action=action[:100],
        resource=resource[:1000],
        allowed=allowed,
        effect=effect,
        mutating=mutating,
        policy=(policy or "")[:200],
        statement=(statement or "")[:200],
        reason=reason[:1000],
        source_ip=source_ip or None,
        user_agent=user_agent[:400],
        api_key=api_key,
        outcome=outcome,
        error=error[:1000],
    )


def audit_record(**fields) -> AuditEvent:
    """Write an audit row (the fields of ``audit_event``)."""
    return audit_save(audit_event(**fields))


def audit_save(event: AuditEvent) -> AuditEvent:
    """Write an audit row made by ``audit_event``. An allowed change's outcome: inside
    ``audited_transaction``, succeeded (the row is only kept if the transaction commits);
    elsewhere the request's answer settles it (``outcomes``)."""
    held = _held.get()
    pending = outcomes.needs_outcome(event)
    if pending and held is not None:
        event.outcome = AuditEvent.Outcome.SUCCEEDED
    row_mapper.insert(event)
    if held is not None:
        held.append(event)
    elif pending:
        outcomes.follow(event)
    return event


_held: ContextVar[list[AuditEvent] | None] = ContextVar("audit_held", default=None)


@contextmanager
def audited_transaction() -> Iterator[None]:
    """One transaction for a request's audit rows and its writes: a single disk flush at commit
    instead of one per row. Should the block fail and roll back, the audit rows recorded in it
    are written again on their own, so a refused or failed request is still on record."""
    held: list[AuditEvent] = []
    token = _held.set(held)
    try:
        with transaction.atomic():
            yield
    except BaseException as exc:
        _held.reset(token)
        token = None
        for event in held:
            event.pk = None
            if event.outcome == AuditEvent.Outcome.SUCCEEDED:  # it was not done after all
                event.outcome = AuditEvent.Outcome.FAILED
                event.error = outcomes.error_text(exc)
            event.save(force_insert=True)
        raise
    finally:
        if token is not None:
            _held.reset(token)


def audit_prune(*, now=None) -> int:
    """Delete events older than ``AUDIT_RETENTION_DAYS``; returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.AUDIT_RETENTION_DAYS)
    deleted, _ = AuditEvent.objects.filter(at__lt=cutoff).delete()
    return deleted


def audit_operator(*, tenant: Tenant, action: str, resource: str, reason: str = "") -> AuditEvent:
    """A change an operator made from the command line (no IAM decision is involved)."""
    return audit_record(
        tenant=tenant,
        principal="system:operator",
        action=action,
        resource=resource,
        allowed=True,
        effect="Operator",
        mutating=True,
        reason=reason or "run from the command line by an operator of the service",
        outcome=AuditEvent.Outcome.SUCCEEDED,
    )


def audit_system(*, tenant: Tenant, action: str, resource: str, reason: str) -> AuditEvent:
    """Something the service did on its own for a tenant (a failover, a restore): no caller and
    no IAM decision, recorded with what happened."""
    return audit_record(
        tenant=tenant,
        principal="system:loopwright",
        action=action,
        resource=resource,
        allowed=True,
        effect="System",
        mutating=True,
        reason=reason,
        outcome=AuditEvent.Outcome.SUCCEEDED,
    )
