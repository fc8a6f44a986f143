"""JSON request bodies, parsed with bounds: UTF-8, at most ``MAX_DEPTH`` levels of nesting,
finite numbers only (``NaN``, ``Infinity`` and literals such as ``1e999`` that overflow a
double are refused), integers within int64 and strings without NUL wherever the body holds
them.

Every failure is a 400 ``{detail, code: "parse_error", field}`` whose detail names the position
(or the field), never the input. Parsing is pydantic-core's (Rust): its recursion
limit is the nesting bound, so no body can reach Python's recursion limit here or later.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pydantic_core
from rest_framework.parsers import BaseParser

from controlplane.errors import DomainError

__all__ = ["MAX_DEPTH", "BodyError", "JSONBodyParser", "loads"]

MAX_DEPTH = 200  # pydantic-core's recursion limit: deeper bodies fail to parse
INT64 = (-(2**63), 2**63 - 1)

# A float literal can overflow to infinity only if its exponent has 3 significant digits or its
# digits run 100 long, an integer can pass int64 only with 19 digits, and a string holds NUL only
# as the escape \u0000: bodies with none of these (all but a few) are not walked at all.
_SUSPECT = re.compile(rb"[eE][+-]?0*[1-9][0-9]{2}|[0-9]{19}|\\u0000")


class BodyError(DomainError):
    """A body that is not JSON within the bounds; ``field`` names where, when it parsed."""

    code = "parse_error"


def loads(raw: bytes) -> Any:
    """``raw`` as a JSON value, within the bounds above (else ``BodyError``)."""
    try:
        value = pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        message = str(exc)
        if "recursion limit" in message:
            message = f"nested more than {MAX_DEPTH} levels deep ({message})"
        raise BodyError(f"JSON parse error: {message[:200]}") from None
    if _SUSPECT.search(raw):
        found = out_of_bounds(value)
        if found is not None:
            path, why = found
            raise BodyError(f"JSON parse error: {path or 'the body'}: {why}", field=path or None)
    return value


def out_of_bounds(value: Any) -> tuple[str, str] | None:
    """Where ``value`` holds a number outside the bounds (non-finite, or an integer beyond
    int64) or a string with NUL (which PostgreSQL cannot store), as a short path, and why;
    None when it holds none. Iterative: any depth."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            for k in item:
                if "\x00" in k:
                    return _short(path), "names must not contain NUL (\\u0000)"
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in item.items())
        elif isinstance(item, str) and "\x00" in item:
            return _short(path), "text must not contain NUL (\\u0000)"
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return _short(path), "numbers must be finite"
        elif type(item) is int and not INT64[0] <= item <= INT64[1]:
            return _short(path), "integers must fit in 64 bits"
    return None


def _short(path: str) -> str:
    return path if len(path) <= 120 else path[:117] + "..."


class JSONBodyParser(BaseParser):
    """DRF's parser for ``application/json`` bodies, with the bounds above."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        return loads(stream.read() if stream is not None else b"")
