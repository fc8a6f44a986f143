"""The audit log of the caller's account, newest first, filtered and paged."""

from __future__ import annotations

from django.utils.dateparse import parse_datetime
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.audit.models import AuditEvent
from controlplane.audit.selectors import audit_events
from controlplane.edge.callers import allow, tenant_of
from controlplane.errors import DomainError

from ..parsing import query_int

MAX_LIMIT = 1000


def event_json(e: AuditEvent) -> dict:
    return {
        "id": e.id,
        "at": e.at.isoformat(),
        "principal": e.principal,
        "action": e.action,
        "resource": e.resource,
        "allowed": e.allowed,
        "effect": e.effect,
        "mutating": e.mutating,
        "policy": e.policy or None,
        "statement": e.statement or None,
        "reason": e.reason,
        "source_ip": e.source_ip,
        "user_agent": e.user_agent,
        "api_key": e.api_key or None,
        "outcome": e.outcome or None,
        "error": e.error or None,
    }


def _when(request: Request, name: str):
    raw = request.query_params.get(name)
    if not raw:
        return None
    value = parse_datetime(raw)
    if value is None:
        raise DomainError(f"{name}: an ISO 8601 date and time", field=name)
    return value


@api_view(["GET"])
def events(request: Request) -> Response:
    allow(request, "audit:LookupEvents")
    q = request.query_params
    allowed = {"true": True, "false": False}.get((q.get("allowed") or "").lower())
    if q.get("allowed") and allowed is None:
        raise DomainError("allowed: true or false", field="allowed")
    limit = query_int(request, "limit", 100, 1, MAX_LIMIT)
    found = list(
        audit_events(
            tenant=tenant_of(request),
            action=q.get("action"),
            principal=q.get("principal"),
            resource=q.get("resource"),
            allowed=allowed,
            since=_when(request, "since"),
            until=_when(request, "until"),
            before_id=query_int(request, "before_id", None, 1, 2**62),
        )[: limit + 1]
    )
    more = len(found) > limit
    found = found[:limit]
    return Response(
        {
            "events": [event_json(e) for e in found],
            "next_before_id": found[-1].id if more else None,
        }
    )
