"""Requests and answers checked against botocore's own service models, for both SageMaker faces.

``checked_input`` validates a decoded JSON request against an operation's input shape (types,
required members, unknown members, length and value bounds, enums; ARN patterns are AWS's and
ours differ, so patterns are not enforced) and raises ``ShapeError`` naming the member's path.
``rendered_output`` turns an operation's answer into JSON as the service model says
(timestamps as epoch seconds, blobs as base64) and refuses, as a bug, a member the shape does
not declare or a required one left out, so every answer is the shape botocore parses.
"""

from __future__ import annotations

import base64
import binascii
import math
from datetime import UTC, datetime
from functools import cache
from typing import Any

from botocore.model import OperationModel, ServiceModel, Shape
from botocore.session import get_session

MAX_DEPTH = 32  # deeper than any shape these operations use
EPOCH_MIN, EPOCH_MAX = 0.0, 253402300799.0  # 1970 to 9999-12-31T23:59:59Z


class ShapeError(ValueError):
    """Input that does not fit the operation's shape: ``path`` names the member."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@cache
def service_model(name: str) -> ServiceModel:
    """botocore's model of ``name`` (``sagemaker``, ``sagemakertrainingsessionruntime``)."""
    return get_session().get_service_model(name)


def operation_model(service: str, operation: str) -> OperationModel:
    return service_model(service).operation_model(operation)


# -- input -------------------------------------------------------------------------------------
def checked_input(operation: OperationModel, value: Any) -> dict:
    """``value`` (decoded JSON) if it fits the operation's input shape; else ``ShapeError``."""
    shape = operation.input_shape
    if shape is None:
        if value not in ({}, None):
            raise ShapeError("", "this operation takes no input")
        return {}
    if not isinstance(value, dict):
        raise ShapeError("", "the request body must be a JSON object")
    _check(shape, value, "", 0)
    return value


def _check(shape: Shape, value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ShapeError(path, "nested too deeply")
    kind = shape.type_name
    check = _CHECKS.get(kind)
    if check is None:  # pragma: no cover - a type botocore's models do not use
        raise ShapeError(path, f"unsupported type {kind}")
    check(shape, value, path, depth)


def _structure(shape: Shape, value: Any, path: str, depth: int) -> None:
    if shape.is_document_type:  # any JSON value: the operation reads it
        return
    if not isinstance(value, dict):
        raise ShapeError(path, "must be an object")
    members = shape.members
    if shape.metadata.get("union") and sum(v is not None for v in value.values()) != 1:
        raise ShapeError(path, f"exactly one member must be set ({', '.join(members)})")
    for name in value:
        if name not in members:
            known = ", ".join(members) or "none"
            raise ShapeError(_join(path, str(name)[:100]), f"unknown member; known: {known}")
    for name in shape.required_members:
        if value.get(name) is None:
            raise ShapeError(_join(path, name), "is required")
    for name, member in value.items():
        if member is not None:
            _check(members[name], member, _join(path, name), depth + 1)


def _list(shape: Shape, value: Any, path: str, depth: int) -> None:
    if not isinstance(value, list):
        raise ShapeError(path, "must be a list")
    _bounded_size(shape, len(value), path, "items")
    for i, item in enumerate(value):
        if item is None:
            raise ShapeError(f"{path}[{i}]", "must not be null")
        _check(shape.member, item, f"{path}[{i}]", depth + 1)


def _map(shape: Shape, value: Any, path: str, depth: int) -> None:
    if not isinstance(value, dict):
        raise ShapeError(path, "must be an object")
    _bounded_size(shape, len(value), path, "entries")
    for key, item in value.items():
        where = f"{path}.{str(key)[:100]}"
        _check(shape.key, key, where, depth + 1)
        if item is None:
            raise ShapeError(where, "must not be null")
        _check(shape.value, item, where, depth + 1)


def _string(shape: Shape, value: Any, path: str, depth: int) -> None:
    if not isinstance(value, str):
        raise ShapeError(path, "must be a string")
    _bounded_size(shape, len(value), path, "characters")
    enum = shape.enum
    if enum and value not in enum:
        raise ShapeError(path, f"must be one of {', '.join(enum)}")


def _integer(shape: Shape, value: Any, path: str, depth: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapeError(path, "must be a whole number")
    _bounded_value(shape, value, path)


def _number(shape: Shape, value: Any, path: str, depth: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ShapeError(path, "must be a number")
    if not math.isfinite(value):
        raise ShapeError(path, "must be a finite number")
    _bounded_value(shape, value, path)


def _boolean(shape: Shape, value: Any, path: str, depth: int) -> None:
    if not isinstance(value, bool):
        raise ShapeError(path, "must be true or false")


def _timestamp(shape: Shape, value: Any, path: str, depth: int) -> None:
    timestamp_of(value, path)


def _blob(shape: Shape, value: Any, path: str, depth: int) -> None:
    if not isinstance(value, str):
        raise ShapeError(path, "must be base64 text")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ShapeError(path, "must be base64 text") from None


_CHECKS = {
    "structure": _structure,
    "list": _list,
    "map": _map,
    "string": _string,
    "integer": _integer,
    "long": _integer,
    "float": _number,
    "double": _number,
    "boolean": _boolean,
    "timestamp": _timestamp,
    "blob": _blob,
}


def _bounded_size(shape: Shape, size: int, path: str, unit: str) -> None:
    low, high = shape.metadata.get("min"), shape.metadata.get("max")
    if low is not None and size < low:
        raise ShapeError(path, f"at least {low} {unit}")
    if high is not None and size > high:
        raise ShapeError(path, f"at most {high} {unit}")


def _bounded_value(shape: Shape, value: float, path: str) -> None:
    low, high = shape.metadata.get("min"), shape.metadata.get("max")
    if low is not None and value < low:
        raise ShapeError(path, f"must be at least {low}")
    if high is not None and value > high:
        raise ShapeError(path, f"must be at most {high}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def timestamp_of(value: Any, path: str) -> datetime:
    """A request's timestamp (epoch seconds, as botocore sends them, or ISO 8601) as a UTC
    datetime; ``ShapeError`` if it is neither or out of range."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not (math.isfinite(value) and EPOCH_MIN <= value <= EPOCH_MAX):
            raise ShapeError(path, "a time from 1970 to 9999 (epoch seconds)")
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str) and len(value) <= 40:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise ShapeError(path, "must be a time: epoch seconds or ISO 8601")


# -- output ------------------------------------------------------------------------------------
def rendered_output(operation: OperationModel, value: dict | None) -> dict:
    """The answer as JSON values, checked against the output shape (``OutputShapeError`` on a
    member the shape lacks or a required one missing: a bug here, never the caller's)."""
    shape = operation.output_shape
    if shape is None:
        return {}
    return _render(shape, value or {}, shape.name)


class OutputShapeError(RuntimeError):
    """An answer that does not fit its output shape: a bug in the face, never the caller's."""


def _output_fits(holds: bool, problem: str) -> None:
    if not holds:
        raise OutputShapeError(problem)


def _render(shape: Shape, value: Any, path: str) -> Any:
    kind = shape.type_name
    if kind == "structure" and shape.is_document_type:
        return value
    if kind == "structure":
        _output_fits(isinstance(value, dict), f"{path}: not an object")
        if shape.metadata.get("union"):
            _output_fits(sum(v is not None for v in value.values()) == 1, f"{path}: not one member")
        out = {}
        for name, item in value.items():
            _output_fits(name in shape.members, f"{path}.{name}: not in the output shape")
            if item is not None:
                out[name] = _render(shape.members[name], item, f"{path}.{name}")
        for name in shape.required_members:
            _output_fits(name in out, f"{path}.{name}: required in the output shape")
        return out
    if kind == "list":
        return [_render(shape.member, item, f"{path}[]") for item in value]
    if kind == "map":
        return {k: _render(shape.value, v, f"{path}.{k}") for k, v in value.items()}
    if kind == "timestamp":
        _output_fits(isinstance(value, datetime), f"{path}: not a datetime")
        return value.timestamp()
    if kind == "blob":
        return base64.b64encode(value).decode("ascii")
    if kind == "string":
        _output_fits(isinstance(value, str), f"{path}: not a string")
        _output_fits(not shape.enum or value in shape.enum, f"{path}: {value!r} not in its enum")
    return value
