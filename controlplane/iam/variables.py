"""Request-context keys and values, and policy variables such as ``${loopwright:PrincipalAccount}``.

Variables resolve from single-valued context keys; ``${*}``, ``${?}`` and ``${$}`` are literals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .actions import SERVICES
from .globs import LITERAL_QMARK, LITERAL_STAR, literal

CONTEXT_PREFIX = "loopwright"

_CONDITION_KEY = re.compile(r"(?P<prefix>[A-Za-z0-9-]+):(?P<name>[A-Za-z0-9_./-]+)")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE_BODY = re.compile(r"\s*(?P<key>[^\s,']+)\s*(?:,\s*'(?P<default>[^']*)'\s*)?")
_LITERALS = {"*": LITERAL_STAR, "?": LITERAL_QMARK, "$": "$"}

ContextValues = dict[str, list[Any]]


def condition_key_error(key: str) -> str | None:
    """Why ``key`` is not a condition key (``service:Name`` or ``loopwright:Name``), or None."""
    match = _CONDITION_KEY.fullmatch(key)
    if match is None:
        return f"invalid condition key {key!r}: use 'loopwright:Name' or 'service:Name'"
    prefix = match["prefix"].lower()
    if prefix != CONTEXT_PREFIX and prefix not in SERVICES:
        return f"unknown condition key prefix {match['prefix']!r} in {key!r}"
    return None


def normalize_context(context: Mapping[str, Any]) -> ContextValues:
    """Context keys lower-cased, every value a list; ``None`` values are left out (absent)."""
    normalized: ContextValues = {}
    for key, value in context.items():
        if value is None:
            continue
        if isinstance(value, list | tuple | set | frozenset):
            normalized[key.lower()] = [item for item in value if item is not None]
        else:
            normalized[key.lower()] = [value]
    return normalized


def as_text(value: Any) -> str:
    """A context value as policy text: booleans are ``true``/``false``, datetimes ISO-8601."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def variable_error(text: str) -> str | None:
    """Why a policy string has a malformed ``${...}`` variable, or None."""
    for match in _VARIABLE.finditer(text):
        body = match[1]
        if body in _LITERALS:
            continue
        parsed = _VARIABLE_BODY.fullmatch(body)
        if parsed is None:
            return f"malformed policy variable {match[0]!r}"
        key_error = condition_key_error(parsed["key"])
        if key_error is not None:
            return f"policy variable {match[0]!r}: {key_error}"
    if "${" in _VARIABLE.sub("", text):
        return f"unterminated policy variable in {text!r}"
    return None


def has_variables(text: str) -> bool:
    return _VARIABLE.search(text) is not None


def blank_variables(text: str) -> str:
    """``text`` with every variable replaced by ``*``, for validating the shape around it."""
    return _VARIABLE.sub("*", text)


def substitute(text: str, context: ContextValues) -> str | None:
    """``text`` with its variables resolved as literals; None when one cannot be resolved."""
    unresolved = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unresolved
        body = match[1]
        if body in _LITERALS:
            return _LITERALS[body]
        parsed = _VARIABLE_BODY.fullmatch(body)
        if parsed is None:
            unresolved = True
            return ""
        values = context.get(parsed["key"].lower())
        if values is not None and len(values) == 1:
            return literal(as_text(values[0]))
        if not values and parsed["default"] is not None:
            return literal(parsed["default"])
        unresolved = True
        return ""

    result = _VARIABLE.sub(replace, text)
    return None if unresolved else result
