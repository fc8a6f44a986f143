"""The ``Condition`` element: parsing ``{operator: {key: values}}`` blocks and evaluating them.

Operators AND, keys AND, values OR (NOR for negated operators), as in AWS IAM.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from .errors import PolicyError
from .operators import OPERATORS, OperatorSpec, Scalar
from .variables import ContextValues, condition_key_error, substitute, variable_error

Qualifier = Literal["", "ForAllValues", "ForAnyValue"]
_QUALIFIERS: tuple[Qualifier, ...] = ("ForAllValues", "ForAnyValue")
_IF_EXISTS = "IfExists"


@dataclass(frozen=True)
class Condition:
    """One ``operator / key / values`` triple of a condition block."""

    operator: str
    key: str
    values: tuple[Scalar, ...]
    single: bool = False  # the values were written as one scalar, not a list

    @property
    def qualifier(self) -> Qualifier:
        return _split_operator(self.operator)[0]

    @property
    def base(self) -> str:
        return _split_operator(self.operator)[1]

    @property
    def if_exists(self) -> bool:
        return _split_operator(self.operator)[2]

    @property
    def spec(self) -> OperatorSpec:
        return OPERATORS[self.base]


@lru_cache(maxsize=512)
def _split_operator(name: str) -> tuple[Qualifier, str, bool]:
    qualifier: Qualifier = ""
    rest = name
    for candidate in _QUALIFIERS:
        if name.startswith(f"{candidate}:"):
            qualifier, rest = candidate, name[len(candidate) + 1 :]
    if rest.endswith(_IF_EXISTS) and rest[: -len(_IF_EXISTS)] in OPERATORS:
        return qualifier, rest[: -len(_IF_EXISTS)], True
    return qualifier, rest, False


def _suggestion(name: str) -> str:
    lowered = name.lower()
    for qualifier in ("", *_QUALIFIERS):
        for base in OPERATORS:
            for suffix in ("", _IF_EXISTS):
                candidate = f"{qualifier}:{base}{suffix}" if qualifier else f"{base}{suffix}"
                if candidate.lower() == lowered:
                    return f" (did you mean {candidate!r}?)"
    return ""


def operator_error(name: str) -> str | None:
    """Why ``name`` is not a condition operator, or None."""
    qualifier, base, if_exists = _split_operator(name)
    if base not in OPERATORS:
        return f"unknown condition operator {name!r}{_suggestion(name)}"
    if base == "Null" and if_exists:
        return "Null takes no IfExists suffix: it already tests whether the key exists"
    if base == "Null" and qualifier:
        return f"Null takes no {qualifier}: prefix"
    return None


def _values(raw: Any, where: str, key: str) -> tuple[tuple[Scalar, ...], bool]:
    if isinstance(raw, list):
        if not raw:
            raise PolicyError(where, f"key {key!r} has an empty list of values")
        items, single = raw, False
    else:
        items, single = [raw], True
    for item in items:
        if item is None or not isinstance(item, str | int | float | bool):
            raise PolicyError(
                where, f"value {item!r} of key {key!r} must be a string, number or boolean"
            )
    return tuple(items), single


def _check_value(spec: OperatorSpec, value: Scalar, where: str, key: str, variables: bool) -> None:
    reason = spec.family.check(value)
    if reason is None and variables and spec.family.variables and isinstance(value, str):
        reason = variable_error(value)
    if reason is not None:
        raise PolicyError(where, f"value {value!r} of key {key!r} {reason}")


def _parse_operator_block(name: str, body: Any, where: str, variables: bool) -> list[Condition]:
    if not isinstance(body, dict) or not body:
        raise PolicyError(where, "must be a non-empty object mapping condition keys to values")
    seen: dict[str, str] = {}
    conditions = []
    spec = OPERATORS[_split_operator(name)[1]]
    for key, raw in body.items():
        key_error = condition_key_error(key)
        if key_error is not None:
            raise PolicyError(where, key_error)
        if key.lower() in seen:
            raise PolicyError(where, f"condition key {key!r} repeats {seen[key.lower()]!r}")
        seen[key.lower()] = key
        values, single = _values(raw, where, key)
        for value in values:
            _check_value(spec, value, where, key, variables)
        conditions.append(Condition(name, key, values, single))
    return conditions


def parse_conditions(raw: Any, where: str, *, variables: bool = True) -> tuple[Condition, ...]:
    """Parse a ``Condition`` element at JSON path ``where``; raises ``PolicyError``."""
    if not isinstance(raw, dict):
        raise PolicyError(where, "must be an object mapping condition operators to {key: values}")
    conditions: list[Condition] = []
    for name, body in raw.items():
        error = operator_error(name)
        if error is not None:
            raise PolicyError(where, error)
        conditions.extend(_parse_operator_block(name, body, f"{where}.{name}", variables))
    return tuple(conditions)


def conditions_to_dict(conditions: Iterable[Condition]) -> dict[str, dict[str, Any]]:
    """The JSON form of parsed conditions, in their original order and shapes."""
    block: dict[str, dict[str, Any]] = {}
    for condition in conditions:
        values = condition.values[0] if condition.single else list(condition.values)
        block.setdefault(condition.operator, {})[condition.key] = values
    return block


def _policy_values(
    condition: Condition, context: ContextValues, variables: bool
) -> list[Any] | None:
    family = condition.spec.family
    prepared = []
    for value in condition.values:
        if variables and family.variables and isinstance(value, str):
            resolved = substitute(value, context)
            if resolved is None:
                return None
            value = resolved
        prepared.append(family.prepare(value))
    return prepared


def _null_holds(condition: Condition, present: bool) -> bool:
    return any(
        (condition.spec.family.prepare(value) == "true") != present for value in condition.values
    )


def condition_holds(
    condition: Condition, context: ContextValues, *, variables: bool = True
) -> bool:
    """Whether one condition holds for a normalized context (see ``normalize_context``)."""
    spec = condition.spec
    present = context.get(condition.key.lower(), [])
    if spec.name == "Null":
        return _null_holds(condition, bool(present))
    if not present:
        if condition.if_exists or condition.qualifier == "ForAllValues":
            return True
        return spec.negated and condition.qualifier != "ForAnyValue"
    policy_values = _policy_values(condition, context, variables)
    if policy_values is None:
        return False

    def matches(value: Any) -> bool:
        coerced = spec.family.coerce(value)
        return coerced is not None and any(spec.test(coerced, p) for p in policy_values)

    outcomes = [matches(value) != spec.negated for value in present]
    if condition.qualifier == "ForAnyValue":
        return any(outcomes)
    if condition.qualifier == "ForAllValues" or spec.negated:
        return all(outcomes)
    return any(outcomes)


def conditions_hold(
    conditions: Iterable[Condition], context: ContextValues, *, variables: bool = True
) -> bool:
    """Whether every condition of a statement holds."""
    return all(condition_holds(c, context, variables=variables) for c in conditions)
