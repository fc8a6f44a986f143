"""Authorize one call: evaluate the caller's policies, record the decision in the audit log, and
refuse with a 403 that names the action and the resource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audit_event, audit_save
from controlplane.errors import AccessDenied

from .actions import ACTIONS
from .evaluation import AccessRequest, Decision, evaluate
from .principals import Principal

READ_PREFIXES = ("Get", "List", "Describe", "Retrieve", "LookupEvents", "Download")
# a key's use changes nothing (as CloudTrail records KMS's cryptographic operations: read-only)
READ_ACTIONS = frozenset({"kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"})


def is_mutating(action: str) -> bool:
    """Whether ``action`` changes something (a write in the audit log); reading, downloading
    and using a key do not."""
    name = action.partition(":")[2]
    return not (name.startswith(READ_PREFIXES) or action in READ_ACTIONS)


def client_ip(request) -> str | None:
    """The caller's address; ``TRUSTED_PROXIES`` hops of X-Forwarded-For are believed."""
    meta = getattr(request, "META", {})
    hops = settings.TRUSTED_PROXIES
    forwarded = [h.strip() for h in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    if hops and len(forwarded) >= hops:
        return forwarded[-hops]
    return meta.get("REMOTE_ADDR") or None


def request_context(principal: Principal, request=None) -> dict[str, Any]:
    """Condition keys every request carries."""
    context: dict[str, Any] = {
        "loopwright:CurrentTime": timezone.now(),
        "loopwright:PrincipalType": "Role" if principal.is_role else "User",
    }
    if principal.api_key is not None:
        context["loopwright:ApiKeyPrefix"] = principal.api_key.prefix
    if request is not None:
        ip = client_ip(request)
        if ip:
            context["loopwright:SourceIp"] = ip
        context["loopwright:SecureTransport"] = bool(request.is_secure())
        agent = request.META.get("HTTP_USER_AGENT")
        if agent:
            context["loopwright:UserAgent"] = agent
    return context


def decide(
    principal: Principal,
    action: str,
    resource: str,
    *,
    request=None,
    context: Mapping[str, Any] | None = None,
) -> tuple[Decision, AuditEvent]:
    """The decision and its audit row, not yet written (``check`` writes it)."""
    decision, values = _evaluate(principal, action, resource, request, context)
    return decision, _event(principal, action, resource, decision, values)


def _evaluate(
    principal: Principal,
    action: str,
    resource: str,
    request,
    context: Mapping[str, Any] | None,
) -> tuple[Decision, dict[str, Any]]:
    assert action in ACTIONS, f"undocumented action {action}"  # noqa: S101 — an invariant of this code, not a check of input
    values = request_context(principal, request) | dict(context or {})
    decision = evaluate(
        principal.policies(), AccessRequest(action, resource, principal.arn, values)
    )
    return decision, values


def _event(
    principal: Principal,
    action: str,
    resource: str,
    decision: Decision,
    values: Mapping[str, Any],
) -> AuditEvent:
    return audit_event(
        tenant=principal.tenant,
        principal=principal.arn,
        action=action,
        resource=resource,
        allowed=decision.allowed,
        effect=decision.effect,
        mutating=is_mutating(action),
        policy=decision.policy,
        statement=decision.statement,
        reason=decision.reason,
        source_ip=values.get("loopwright:SourceIp"),
        user_agent=str(values.get("loopwright:UserAgent", "")),
        api_key=principal.api_key.prefix if principal.api_key else "",
    )


def check(
    principal: Principal,
    action: str,
    resource: str,
    *,
    request=None,
    context: Mapping[str, Any] | None = None,
    audit_allowed: bool = True,
) -> Decision:
    """Decide and audit, without raising. ``audit_allowed=False``: an allowed decision is not
    recorded, nor its audit row built (a dashboard's automatic refresh of what its audited page
    view showed; a streamed answer's retrieve, part of the submit it answers); a refused one
    always is."""
    decision, values = _evaluate(principal, action, resource, request, context)
    if decision.allowed and not audit_allowed:
        return decision
    audit_save(_event(principal, action, resource, decision, values))
    return decision


def authorize(
    principal: Principal,
    action: str,
    resource: str,
    *,
    request=None,
    context: Mapping[str, Any] | None = None,
    audit_allowed: bool = True,
) -> Decision:
    """Allow or raise ``AccessDenied`` (403) naming the principal, the action and the resource."""
    decision = check(
        principal, action, resource, request=request, context=context, audit_allowed=audit_allowed
    )
    if not decision.allowed:
        raise denial(principal.arn, action, resource, decision)
    return decision


def enforce(decision: Decision, event: AuditEvent) -> Decision:
    """``authorize`` for a decision ``decide`` made: write its audit row, then allow or raise
    ``AccessDenied`` (403) as ``authorize`` does."""
    audit_save(event)
    if not decision.allowed:
        raise denial(event.principal, event.action, event.resource, decision)
    return decision


def denial(principal: str, action: str, resource: str, decision: Decision) -> AccessDenied:
    """The 403 of a refused decision, naming the principal, the action and the resource."""
    return AccessDenied(
        f"{principal} is not authorized to perform {action} on {resource}: {decision.reason}"
    )
