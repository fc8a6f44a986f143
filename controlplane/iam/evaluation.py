"""Policy evaluation as in AWS IAM: an explicit Deny beats every Allow; no Allow means deny.

``evaluate`` checks permission policies for a request; ``evaluate_trust`` checks a role's trust.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .arns import Arn, ArnError, arn_like
from .conditions import conditions_hold
from .elements import principal_matches
from .globs import glob_match
from .policy import PolicyDocument, Statement
from .variables import ContextValues, normalize_context, substitute

DecisionEffect = Literal["Allow", "ExplicitDeny", "ImplicitDeny"]

# Keys derived from the principal's ARN unless the context sets them itself.
PRINCIPAL_ARN_KEY = "loopwright:PrincipalArn"
PRINCIPAL_ACCOUNT_KEY = "loopwright:PrincipalAccount"
USERNAME_KEY = "loopwright:username"


@dataclass(frozen=True)
class AccessRequest:
    """Who (``principal`` ARN) asks to do ``action`` on ``resource`` (an ARN, or ``*``)."""

    action: str
    resource: str
    principal: str = ""
    context: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """The outcome; ``policy``/``statement`` name the deciding statement (None if none did)."""

    allowed: bool
    effect: DecisionEffect
    policy: str | None
    statement: str | None
    reason: str


def evaluation_context(principal: str, context: Mapping[str, Any]) -> ContextValues:
    """The condition values a statement is checked against: ``context`` (the request's keys,
    ``controlplane.iam.access.request_context``) normalized, with the keys derived from the
    ``principal`` ARN added where it does not set them."""
    derived: dict[str, Any] = {}
    try:
        arn = Arn.parse(principal)
    except ArnError:
        pass
    else:
        derived = {PRINCIPAL_ARN_KEY: principal, PRINCIPAL_ACCOUNT_KEY: arn.account}
        if arn.service == "iam" and arn.resource_type == "user":
            derived[USERNAME_KEY] = arn.resource_id
    return normalize_context(derived) | normalize_context(context)


def _action_matches(statement: Statement, action: str) -> bool:
    named = any(glob_match(pattern, action, ignore_case=True) for pattern in statement.actions)
    return named != statement.not_action


def _resource_matches(
    statement: Statement, resource: str, context: ContextValues, variables: bool
) -> bool:
    patterns = []
    for pattern in statement.resources:
        resolved = substitute(pattern, context) if variables else pattern
        if resolved is None:
            return False  # an unresolvable variable: the statement does not apply
        patterns.append(resolved)
    named = any(arn_like(pattern, resource) for pattern in patterns)
    return named != statement.not_resource


def _label(statement: Statement) -> str:
    return repr(statement.sid) if statement.sid is not None else statement.label


def _decide(effect: DecisionEffect, policy: str, statement: Statement) -> Decision:
    where = f"statement {_label(statement)} of policy {policy!r}"
    if effect == "Allow":
        return Decision(True, "Allow", policy, statement.label, f"allowed by {where}")
    return Decision(False, "ExplicitDeny", policy, statement.label, f"explicitly denied by {where}")


def _first_match(
    policies: Iterable[tuple[str, PolicyDocument]],
    applies: Callable[[Statement, bool], bool],
    kind: str,
) -> Decision | None:
    allow: Decision | None = None
    for name, document in policies:
        if document.kind != kind:
            raise ValueError(f"policy {name!r} is a {document.kind} policy, not a {kind} policy")
        for statement in document.statements:
            if not applies(statement, document.variables):
                continue
            if statement.effect == "Deny":
                return _decide("ExplicitDeny", name, statement)
            allow = allow or _decide("Allow", name, statement)
    return allow


def evaluate(policies: Iterable[tuple[str, PolicyDocument]], request: AccessRequest) -> Decision:
    """Decide ``request`` against named permission policies.

    The principal's ARN supplies ``loopwright:PrincipalArn``, ``loopwright:PrincipalAccount`` and,
    for users, ``loopwright:username``, unless the request context sets them.
    """
    context = evaluation_context(request.principal, request.context)

    def applies(statement: Statement, variables: bool) -> bool:
        return (
            _action_matches(statement, request.action)
            and _resource_matches(statement, request.resource, context, variables)
            and conditions_hold(statement.conditions, context, variables=variables)
        )

    decision = _first_match(policies, applies, "permission")
    if decision is not None:
        return decision
    reason = f"no policy allows {request.action} on {request.resource}"
    return Decision(False, "ImplicitDeny", None, None, reason)


def evaluate_trust(
    trust_policy: PolicyDocument,
    principal_arn: str,
    *,
    context: Mapping[str, Any] | None = None,
    action: str = "sts:AssumeRole",
    policy_name: str = "trust",
) -> Decision:
    """Whether ``principal_arn`` (or a service principal) may ``action`` under a trust policy."""
    values = evaluation_context(principal_arn, context or {})

    def applies(statement: Statement, variables: bool) -> bool:
        if statement.principal is None:
            return False
        named = principal_matches(statement.principal, principal_arn)
        return (
            named != statement.not_principal
            and _action_matches(statement, action)
            and conditions_hold(statement.conditions, values, variables=variables)
        )

    decision = _first_match([(policy_name, trust_policy)], applies, "trust")
    if decision is not None:
        return decision
    reason = f"trust policy {policy_name!r} does not allow {principal_arn} to perform {action}"
    return Decision(False, "ImplicitDeny", None, None, reason)
