"""Limits a policy document must keep to be saved, so that evaluating it stays cheap whatever a
request carries: wildcards per pattern, characters per condition value, values per condition key
and condition values per document (docs/security.md, "Abuse limits")."""

from __future__ import annotations

from .errors import PolicyError
from .globs import wildcard_count
from .policy import PolicyDocument, Statement
from .variables import has_variables

MAX_PATTERN_WILDCARDS = 16
MAX_CONDITION_VALUE_CHARS = 512
MAX_CONDITION_VALUES = 20  # per condition key
MAX_DOCUMENT_CONDITION_VALUES = 100

# Condition operators whose values are patterns (``ArnEquals`` matches like ``ArnLike``).
PATTERN_OPERATORS = frozenset(
    {"StringLike", "StringNotLike", "ArnLike", "ArnNotLike", "ArnEquals", "ArnNotEquals"}
)
_LITERAL_VARIABLES = ("${*}", "${?}")


def active_wildcards(pattern: str) -> int:
    """The ``*`` and ``?`` of a pattern that match more than themselves (``${*}`` and ``${?}``
    are the characters themselves)."""
    if has_variables(pattern):
        for escaped in _LITERAL_VARIABLES:
            pattern = pattern.replace(escaped, "")
    return wildcard_count(pattern)


def _check_pattern(pattern: str, where: str) -> None:
    count = active_wildcards(pattern)
    if count > MAX_PATTERN_WILDCARDS:
        raise PolicyError(
            where,
            f"{count} wildcards (* and ?) in one pattern; the limit is {MAX_PATTERN_WILDCARDS}",
        )


def _entry_path(where: str, position: int, single: bool) -> str:
    return where if single else f"{where}[{position}]"


def _check_elements(statement: Statement, where: str) -> None:
    action_key = "NotAction" if statement.not_action else "Action"
    for position, action in enumerate(statement.actions):
        _check_pattern(
            action, _entry_path(f"{where}.{action_key}", position, statement.single_action)
        )
    resource_key = "NotResource" if statement.not_resource else "Resource"
    for position, resource in enumerate(statement.resources):
        path = _entry_path(f"{where}.{resource_key}", position, statement.single_resource)
        _check_pattern(resource, path)


def _check_conditions(statement: Statement, where: str) -> int:
    """Checks each condition of ``statement``; the number of values they hold."""
    total = 0
    for condition in statement.conditions:
        path = f"{where}.Condition.{condition.operator}"
        if len(condition.values) > MAX_CONDITION_VALUES:
            raise PolicyError(
                path,
                f"key {condition.key!r} has {len(condition.values)} values; "
                f"the limit is {MAX_CONDITION_VALUES} per key",
            )
        for value in condition.values:
            text = value if isinstance(value, str) else str(value)
            if len(text) > MAX_CONDITION_VALUE_CHARS:
                raise PolicyError(
                    path,
                    f"a value of key {condition.key!r} has {len(text)} characters; "
                    f"the limit is {MAX_CONDITION_VALUE_CHARS}",
                )
            if condition.base in PATTERN_OPERATORS:
                _check_pattern(text, path)
        total += len(condition.values)
    return total


def check_policy_limits(document: PolicyDocument) -> None:
    """Raise ``PolicyError`` at the first element of ``document`` past a limit."""
    total = 0
    for statement in document.statements:
        where = f"Statement[{statement.index}]" if document.statement_list else "Statement"
        _check_elements(statement, where)
        total += _check_conditions(statement, where)
        if total > MAX_DOCUMENT_CONDITION_VALUES:
            raise PolicyError(
                f"{where}.Condition",
                f"the document holds more than {MAX_DOCUMENT_CONDITION_VALUES} condition "
                f"values; the limit is {MAX_DOCUMENT_CONDITION_VALUES} per policy",
            )
