"""IAM JSON policy documents (permission and trust policies), parsed and validated into dataclasses.

Errors are ``PolicyError``s located by a JSON path such as ``Statement[1].Condition``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from .conditions import Condition, conditions_to_dict, parse_conditions
from .elements import (
    PrincipalElement,
    check_action,
    check_resource,
    item_path,
    parse_principal,
    parse_strings,
    principal_to_dict,
)
from .errors import PolicyError

__all__ = [
    "CURRENT_VERSION",
    "MAX_POLICY_CHARS",
    "VERSIONS",
    "PolicyDocument",
    "PolicyError",
    "PolicyKind",
    "Statement",
]

PolicyKind = Literal["permission", "trust"]
Effect = Literal["Allow", "Deny"]

MAX_POLICY_CHARS = 6144
CURRENT_VERSION = "2012-10-17"
VERSIONS = (CURRENT_VERSION, "2008-10-17")  # 2008-10-17 has no policy variables

_DOCUMENT_KEYS = ("Version", "Id", "Statement")
_STATEMENT_KEYS = (
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
)
_SID = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class Statement:
    """One statement. ``not_*`` flags mark ``NotAction``/``NotResource``/``NotPrincipal``."""

    effect: Effect
    actions: tuple[str, ...]
    resources: tuple[str, ...] = ()
    principal: PrincipalElement | None = None
    conditions: tuple[Condition, ...] = ()
    sid: str | None = None
    index: int = 0
    not_action: bool = False
    not_resource: bool = False
    not_principal: bool = False
    single_action: bool = False  # written as a string rather than a list
    single_resource: bool = False

    @property
    def label(self) -> str:
        """The Sid, or ``#<index>`` for a statement without one."""
        return self.sid if self.sid is not None else f"#{self.index}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.sid is not None:
            out["Sid"] = self.sid
        out["Effect"] = self.effect
        if self.principal is not None:
            out["NotPrincipal" if self.not_principal else "Principal"] = principal_to_dict(
                self.principal
            )
        actions = self.actions[0] if self.single_action else list(self.actions)
        out["NotAction" if self.not_action else "Action"] = actions
        if self.resources:
            resources = self.resources[0] if self.single_resource else list(self.resources)
            out["NotResource" if self.not_resource else "Resource"] = resources
        if self.conditions:
            out["Condition"] = conditions_to_dict(self.conditions)
        return out


@dataclass(frozen=True)
class PolicyDocument:
    """A validated policy document; ``to_dict()`` gives back its JSON form."""

    version: str
    statements: tuple[Statement, ...]
    kind: PolicyKind = "permission"
    id: str | None = None
    statement_list: bool = True  # Statement was written as a list

    @property
    def variables(self) -> bool:
        """Whether ``${...}`` policy variables are substituted (Version 2012-10-17 only)."""
        return self.version == CURRENT_VERSION

    @classmethod
    def parse(cls, doc: dict[str, Any] | str, *, kind: PolicyKind = "permission") -> PolicyDocument:
        """Parse and validate ``doc`` (a dict or JSON text); raises ``PolicyError``."""
        if kind not in ("permission", "trust"):
            raise ValueError(f"kind must be 'permission' or 'trust', got {kind!r}")
        data = _load(doc)
        _check_size(data)
        for key in data:
            if key not in _DOCUMENT_KEYS:
                raise PolicyError(
                    "", f"unknown element {key!r} (expected {', '.join(_DOCUMENT_KEYS)})"
                )
        version = _parse_version(data)
        policy_id = data.get("Id")
        if policy_id is not None and not isinstance(policy_id, str):
            raise PolicyError("Id", "must be a string")
        statements, as_list = _parse_statements(data, kind, version == CURRENT_VERSION)
        return cls(version, statements, kind, policy_id, as_list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"Version": self.version}
        if self.id is not None:
            out["Id"] = self.id
        statements = [statement.to_dict() for statement in self.statements]
        out["Statement"] = statements if self.statement_list else statements[0]
        return out

    def to_json(self) -> str:
        """Compact JSON, the form whose length is limited to ``MAX_POLICY_CHARS``."""
        return _compact(self.to_dict())


def _compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _load(doc: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(doc, str):
        try:
            doc = json.loads(doc, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
        except ValueError as error:  # JSONDecodeError included
            raise PolicyError("", f"invalid JSON: {error}") from None
    if not isinstance(doc, dict):
        raise PolicyError("", "a policy document must be a JSON object")
    return doc


def _check_size(data: dict[str, Any]) -> None:
    try:
        size = len(_compact(data))
    except (TypeError, ValueError) as error:
        raise PolicyError("", f"not JSON-serializable: {error}") from None
    if size > MAX_POLICY_CHARS:
        raise PolicyError(
            "",
            f"policy document is {size} characters as compact JSON; "
            f"the limit is {MAX_POLICY_CHARS}",
        )


def _parse_version(data: dict[str, Any]) -> str:
    if "Version" not in data:
        raise PolicyError("Version", f'missing; use "{CURRENT_VERSION}"')
    version = data["Version"]
    if version not in VERSIONS:
        raise PolicyError(
            "Version", f'unsupported version {version!r}; use "{CURRENT_VERSION}" (or "2008-10-17")'
        )
    return str(version)


def _parse_statements(
    data: dict[str, Any], kind: PolicyKind, variables: bool
) -> tuple[tuple[Statement, ...], bool]:
    if "Statement" not in data:
        raise PolicyError("Statement", "missing")
    raw = data["Statement"]
    as_list = isinstance(raw, list)
    items = raw if as_list else [raw]
    if not items:
        raise PolicyError("Statement", "must not be empty")
    statements: list[Statement] = []
    sids: dict[str, str] = {}
    for index, item in enumerate(items):
        where = f"Statement[{index}]" if as_list else "Statement"
        statement = _parse_statement(item, where, index, kind, variables)
        if statement.sid is not None:
            if statement.sid in sids:
                raise PolicyError(
                    f"{where}.Sid",
                    f"duplicate Sid {statement.sid!r} (also in {sids[statement.sid]})",
                )
            sids[statement.sid] = where
        statements.append(statement)
    return tuple(statements), as_list


def _exactly_one(item: dict[str, Any], where: str, first: str, second: str) -> str:
    if first in item and second in item:
        raise PolicyError(where, f"has both {first} and {second}; use exactly one")
    if first not in item and second not in item:
        raise PolicyError(where, f"needs {first} or {second}")
    return first if first in item else second


def _forbid(item: dict[str, Any], where: str, keys: tuple[str, ...], kind: PolicyKind) -> None:
    for key in keys:
        if key in item:
            raise PolicyError(f"{where}.{key}", f"not allowed in a {kind} policy")


def _parse_sid(item: dict[str, Any], where: str) -> str | None:
    sid = item.get("Sid")
    if sid is not None and not (isinstance(sid, str) and _SID.fullmatch(sid)):
        raise PolicyError(f"{where}.Sid", f"must be alphanumeric (A-Z, a-z, 0-9), got {sid!r}")
    return sid


def _parse_effect(item: dict[str, Any], where: str) -> Effect:
    if "Effect" not in item:
        raise PolicyError(f"{where}.Effect", 'missing; must be "Allow" or "Deny"')
    effect = item["Effect"]
    if effect == "Allow":
        return "Allow"
    if effect == "Deny":
        return "Deny"
    raise PolicyError(f"{where}.Effect", f'must be "Allow" or "Deny", got {effect!r}')


def _parse_actions(item: dict[str, Any], where: str, kind: PolicyKind) -> dict[str, Any]:
    key = _exactly_one(item, where, "Action", "NotAction")
    actions, single = parse_strings(item[key], f"{where}.{key}")
    for position, action in enumerate(actions):
        check_action(action, item_path(f"{where}.{key}", position, single), kind)
    return {"actions": actions, "single_action": single, "not_action": key == "NotAction"}


def _parse_resources(item: dict[str, Any], where: str, variables: bool) -> dict[str, Any]:
    _forbid(item, where, ("Principal", "NotPrincipal"), "permission")
    key = _exactly_one(item, where, "Resource", "NotResource")
    resources, single = parse_strings(item[key], f"{where}.{key}")
    for position, resource in enumerate(resources):
        check_resource(resource, item_path(f"{where}.{key}", position, single), variables)
    return {"resources": resources, "single_resource": single, "not_resource": key == "NotResource"}


def _parse_principal(item: dict[str, Any], where: str) -> dict[str, Any]:
    _forbid(item, where, ("Resource", "NotResource"), "trust")
    key = _exactly_one(item, where, "Principal", "NotPrincipal")
    principal = parse_principal(item[key], f"{where}.{key}")
    return {"principal": principal, "not_principal": key == "NotPrincipal"}


def _parse_statement(
    item: Any, where: str, index: int, kind: PolicyKind, variables: bool
) -> Statement:
    if not isinstance(item, dict):
        raise PolicyError(where, "a statement must be a JSON object")
    for key in item:
        if key not in _STATEMENT_KEYS:
            raise PolicyError(where, f"unknown element {key!r}")
    sid = _parse_sid(item, where)
    effect = _parse_effect(item, where)
    parts = _parse_actions(item, where, kind)
    if kind == "permission":
        parts.update(_parse_resources(item, where, variables))
    else:
        parts.update(_parse_principal(item, where))
    if "Condition" in item:
        where_condition = f"{where}.Condition"
        parts["conditions"] = parse_conditions(
            item["Condition"], where_condition, variables=variables
        )
    return Statement(effect=effect, sid=sid, index=index, **parts)
