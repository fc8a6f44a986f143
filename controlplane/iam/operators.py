"""Condition operator families: validating policy values, coercing context values, comparing them.

Each operator is stated in its positive form; negated operators (``StringNotLike``...) invert it.
"""

from __future__ import annotations

import base64
import binascii
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from types import MappingProxyType
from typing import Any

from .arns import ArnError, arn_like, check_arn_pattern
from .globs import glob_match, unescape
from .variables import as_text, blank_variables, has_variables

Scalar = str | int | float | bool

_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_BOOLEANS = ("true", "false")


@dataclass(frozen=True)
class Family:
    """How one kind of condition value is checked (policy side) and coerced (both sides)."""

    name: str
    variables: bool
    check: Callable[[Scalar], str | None]
    prepare: Callable[[Scalar], Any]
    coerce: Callable[[Any], Any]


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    family: Family
    test: Callable[[Any, Any], bool]
    negated: bool = False


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- strings ---------------------------------------------------------------------------------


def _check_string(value: Scalar) -> str | None:
    return None if isinstance(value, str | int | float | bool) else "is not a string"


def _coerce_string(value: Any) -> str | None:
    return as_text(value) if isinstance(value, str | int | float | bool | datetime) else None


def _string_equals(context: str, policy: str) -> bool:
    return context == unescape(policy)


def _string_equals_ignore_case(context: str, policy: str) -> bool:
    return context.casefold() == unescape(policy).casefold()


def _string_like(context: str, policy: str) -> bool:
    return glob_match(policy, context)


# -- numbers ---------------------------------------------------------------------------------


def _to_decimal(value: Any) -> Decimal | None:
    if _is_number(value):
        return Decimal(str(value)) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return Decimal(value)
    return None


def _check_number(value: Scalar) -> str | None:
    return None if _to_decimal(value) is not None else "is not a number"


# -- dates -----------------------------------------------------------------------------------


def _to_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        moment = value
    elif _is_number(value) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _check_date(value: Scalar) -> str | None:
    if _to_datetime(value) is None:
        return "is not an ISO-8601 date or epoch seconds"
    return None


# -- booleans and binary ---------------------------------------------------------------------


def _check_bool(value: Scalar) -> str | None:
    if isinstance(value, bool) or value in _BOOLEANS:
        return None
    if isinstance(value, str) and has_variables(value):
        return None
    return 'is not true or false (a JSON boolean or "true"/"false")'


def _prepare_bool(value: Scalar) -> str:
    return unescape(as_text(value)).lower()


def _coerce_bool(value: Any) -> str | None:
    if isinstance(value, bool | str):
        return as_text(value).lower()
    return None


def _to_bytes(value: Any) -> bytes | None:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def _check_binary(value: Scalar) -> str | None:
    return None if isinstance(value, str) and _to_bytes(value) is not None else "is not base64"


# -- IP addresses ----------------------------------------------------------------------------


def _to_network(value: Any) -> Any:
    try:
        return ip_network(value, strict=False) if isinstance(value, str) else None
    except ValueError:
        return None


def _check_network(value: Scalar) -> str | None:
    return None if _to_network(value) is not None else "is not an IP address or CIDR block"


def _to_address(value: Any) -> IPv4Address | IPv6Address | None:
    if isinstance(value, IPv4Address | IPv6Address):
        return value
    try:
        return ip_address(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _in_network(address: IPv4Address | IPv6Address, network: Any) -> bool:
    return bool(address.version == network.version and address in network)


# -- ARNs ------------------------------------------------------------------------------------


def _check_arn(value: Scalar) -> str | None:
    if not isinstance(value, str):
        return "is not an ARN"
    try:
        check_arn_pattern(blank_variables(value))
    except ArnError as error:
        return f"is not an ARN: {error}"
    return None


def _coerce_arn(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _check_null(value: Scalar) -> str | None:
    if isinstance(value, bool) or value in _BOOLEANS:
        return None
    return 'is not true or false (a JSON boolean or "true"/"false")'


STRING = Family("string", True, _check_string, as_text, _coerce_string)
NUMERIC = Family("numeric", False, _check_number, _to_decimal, _to_decimal)
DATE = Family("date", False, _check_date, _to_datetime, _to_datetime)
BOOL = Family("bool", True, _check_bool, _prepare_bool, _coerce_bool)
BINARY = Family("binary", False, _check_binary, _to_bytes, _to_bytes)
IP = Family("ip", False, _check_network, _to_network, _to_address)
ARN = Family("arn", True, _check_arn, as_text, _coerce_arn)
NULL = Family("null", False, _check_null, _prepare_bool, _coerce_bool)


def _specs() -> list[OperatorSpec]:
    ordered: list[tuple[str, Callable[[Any, Any], bool]]] = [
        ("Equals", operator.eq),
        ("LessThan", operator.lt),
        ("LessThanEquals", operator.le),
        ("GreaterThan", operator.gt),
        ("GreaterThanEquals", operator.ge),
    ]
    specs = [
        OperatorSpec("StringEquals", STRING, _string_equals),
        OperatorSpec("StringNotEquals", STRING, _string_equals, negated=True),
        OperatorSpec("StringEqualsIgnoreCase", STRING, _string_equals_ignore_case),
        OperatorSpec("StringNotEqualsIgnoreCase", STRING, _string_equals_ignore_case, True),
        OperatorSpec("StringLike", STRING, _string_like),
        OperatorSpec("StringNotLike", STRING, _string_like, negated=True),
        OperatorSpec("Bool", BOOL, operator.eq),
        OperatorSpec("BinaryEquals", BINARY, operator.eq),
        OperatorSpec("IpAddress", IP, _in_network),
        OperatorSpec("NotIpAddress", IP, _in_network, negated=True),
        OperatorSpec("ArnEquals", ARN, lambda context, policy: arn_like(policy, context)),
        OperatorSpec("ArnLike", ARN, lambda context, policy: arn_like(policy, context)),
        OperatorSpec("ArnNotEquals", ARN, lambda c, p: arn_like(p, c), negated=True),
        OperatorSpec("ArnNotLike", ARN, lambda c, p: arn_like(p, c), negated=True),
        OperatorSpec("Null", NULL, operator.eq),
    ]
    for prefix, family in (("Numeric", NUMERIC), ("Date", DATE)):
        for suffix, test in ordered:
            specs.append(OperatorSpec(f"{prefix}{suffix}", family, test))
        specs.append(OperatorSpec(f"{prefix}NotEquals", family, operator.eq, negated=True))
    return specs


OPERATORS: MappingProxyType[str, OperatorSpec] = MappingProxyType(
    {spec.name: spec for spec in _specs()}
)
