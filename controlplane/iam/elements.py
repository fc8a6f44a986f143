"""Validation of a statement's ``Action``, ``Resource`` and ``Principal`` elements.

A principal is ``"*"`` or ``{"Loopwright": [...], "Service": [...]}`` (ARNs, accounts, services).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .actions import RESOURCE_TYPES, SERVICES, is_known_service, matching_actions, resolve_action
from .arns import Arn, ArnError, check_arn_pattern, is_account_id, split_arn
from .errors import PolicyError
from .globs import glob_match, has_wildcard
from .variables import blank_variables, variable_error

_SERVICE_PRINCIPAL = re.compile(r"[a-z][a-z0-9-]*\.loopwright\.dev")
_PRINCIPAL_TYPES = ("Loopwright", "Service")
_PRINCIPAL_RESOURCE_TYPES = ("user", "role")


def item_path(where: str, position: int, single: bool) -> str:
    """The JSON path of one entry of a string-or-list element."""
    return where if single else f"{where}[{position}]"


def parse_strings(raw: Any, where: str) -> tuple[tuple[str, ...], bool]:
    """A string or non-empty list of non-empty strings, and whether it was a single string."""
    if isinstance(raw, str):
        if not raw:
            raise PolicyError(where, "must not be empty")
        return (raw,), True
    if not isinstance(raw, list):
        raise PolicyError(where, "must be a string or a list of strings")
    if not raw:
        raise PolicyError(where, "must not be an empty list")
    for position, item in enumerate(raw):
        if not isinstance(item, str):
            raise PolicyError(f"{where}[{position}]", f"must be a string, got {item!r}")
        if not item:
            raise PolicyError(f"{where}[{position}]", "must not be empty")
    return tuple(raw), False


# -- actions ---------------------------------------------------------------------------------


def _named_actions(action: str, where: str) -> list[str]:
    if action == "*":
        return ["*"]
    service, colon, name = action.partition(":")
    if not colon or not service or not name:
        raise PolicyError(where, f"must be '*' or 'service:Action', got {action!r}")
    if not has_wildcard(service) and not is_known_service(service):
        raise PolicyError(where, f"unknown service {service!r} in action {action!r}")
    if not has_wildcard(action):
        try:
            return [resolve_action(action)]
        except LookupError:
            raise PolicyError(where, f"unknown action {action!r}") from None
    matches = matching_actions(action)
    if not matches:
        raise PolicyError(where, f"action pattern {action!r} matches no known action")
    return matches


def check_action(action: str, where: str, kind: str) -> None:
    """Validate one ``Action``/``NotAction`` entry against the catalogue."""
    named = _named_actions(action, where)
    if kind == "trust" and named != ["*"] and any(not n.startswith("sts:") for n in named):
        raise PolicyError(where, f"a trust policy may name only sts actions, got {action!r}")


# -- resources -------------------------------------------------------------------------------


def _check_resource_type(service: str, resource: str, arn: str) -> str | None:
    resource_type, slash, resource_id = resource.partition("/")
    if has_wildcard(service) or has_wildcard(resource_type):
        return None
    if not slash and not has_wildcard(resource_id):
        return f"resource must be '<type>/<id>' or a pattern, got {resource!r} in {arn!r}"
    types = RESOURCE_TYPES.get(service)
    if types is None:
        return f'service {service!r} has no resource ARNs; use "*"'
    if resource_type not in types:
        expected = ", ".join(sorted(types))
        return f"unknown resource type {resource_type!r} for {service!r} (expected {expected})"
    return None


def check_resource(resource: str, where: str, variables: bool) -> None:
    """Validate one ``Resource``/``NotResource`` entry: ``*`` or a Loopwright ARN pattern."""
    if resource == "*":
        return
    shape = resource
    if variables:
        error = variable_error(resource)
        if error is not None:
            raise PolicyError(where, error)
        shape = blank_variables(resource)
    try:
        check_arn_pattern(shape)
    except ArnError as error:
        raise PolicyError(where, str(error)) from None
    parts = split_arn(shape)
    service, resource_part = parts[2], parts[5]
    if not any(glob_match(service, known) for known in SERVICES):
        raise PolicyError(where, f"unknown service {service!r} in resource {resource!r}")
    reason = _check_resource_type(service, resource_part, resource)
    if reason is not None:
        raise PolicyError(where, reason)


# -- principals ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrincipalElement:
    """A statement's ``Principal`` element (whom a trust policy names; the caller is
    ``controlplane.iam.principals.Principal``). ``everyone`` is the ``"*"`` form; ``single_*`` mark
    lists written as one string."""

    everyone: bool = False
    loopwright: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    single_loopwright: bool = False
    single_service: bool = False


def _check_loopwright_principal(entry: str, where: str) -> None:
    if entry == "*" or is_account_id(entry):
        return
    if has_wildcard(entry):
        raise PolicyError(
            where, f"wildcards are not allowed in principals, got {entry!r} (use ArnLike on a key)"
        )
    try:
        arn = Arn.parse(entry)
    except ArnError as error:
        message = f"{entry!r} is not '*', an account id or a principal ARN: {error}"
        raise PolicyError(where, message) from None
    if arn.service != "iam" or arn.resource_type not in _PRINCIPAL_RESOURCE_TYPES:
        raise PolicyError(where, f"{entry!r} is not the ARN of an iam user or role")


def _check_service_principal(entry: str, where: str) -> None:
    if not _SERVICE_PRINCIPAL.fullmatch(entry):
        raise PolicyError(
            where, f"{entry!r} is not a service principal like 'sessions.loopwright.dev'"
        )


def parse_principal(raw: Any, where: str) -> PrincipalElement:
    """Parse a ``Principal``/``NotPrincipal`` element."""
    if raw == "*":
        return PrincipalElement(everyone=True)
    if not isinstance(raw, dict) or not raw:
        raise PolicyError(where, 'must be "*" or an object with Loopwright and/or Service')
    for key in raw:
        if key not in _PRINCIPAL_TYPES:
            raise PolicyError(
                where, f"unknown principal type {key!r} (expected Loopwright or Service)"
            )
    loopwright: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    single_loopwright = single_service = False
    if "Loopwright" in raw:
        loopwright, single_loopwright = parse_strings(raw["Loopwright"], f"{where}.Loopwright")
        for position, entry in enumerate(loopwright):
            path = item_path(f"{where}.Loopwright", position, single_loopwright)
            _check_loopwright_principal(entry, path)
    if "Service" in raw:
        services, single_service = parse_strings(raw["Service"], f"{where}.Service")
        for position, entry in enumerate(services):
            _check_service_principal(entry, item_path(f"{where}.Service", position, single_service))
    return PrincipalElement(False, loopwright, services, single_loopwright, single_service)


def principal_to_dict(principal: PrincipalElement) -> str | dict[str, Any]:
    if principal.everyone:
        return "*"
    out: dict[str, Any] = {}
    if principal.loopwright:
        single = principal.single_loopwright
        out["Loopwright"] = principal.loopwright[0] if single else list(principal.loopwright)
    if principal.services:
        single = principal.single_service
        out["Service"] = principal.services[0] if single else list(principal.services)
    return out


def principal_matches(principal: PrincipalElement, caller: str) -> bool:
    """Whether ``caller`` (a principal ARN or a service principal) is named by ``principal``."""
    if principal.everyone:
        return True
    if not caller.startswith("arn:"):
        return caller in principal.services
    try:
        account = Arn.parse(caller).account
    except ArnError:
        return False
    return any(entry in ("*", account, caller) for entry in principal.loopwright)
