"""hypothesis strategies from botocore's service models, for fuzzing a face's operations:
``valid_input(shape)`` draws inputs that fit an operation's input shape (every bound and enum
kept, one member of a union, any JSON for a document), ``mutated_input(shape)`` draws such an input with one thing broken (a required member
dropped, a member of the wrong type, a bound crossed, an unknown member, an enum value that is
not one, a null, a huge value), so a server's refusals can be held to "a 4xx, never a 5xx"."""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime
from typing import Any

from botocore.model import Shape
from hypothesis import strategies as st

MAX_ITEMS = 3  # list and map sizes drawn (bounds permitting)
MAX_TEXT = 40
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=MAX_TEXT)
NAMEISH = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def valid_input(shape: Shape | None, *, seeds: dict[str, Any] | None = None) -> st.SearchStrategy:
    """Inputs that fit ``shape``; ``seeds``: member name → a strategy used for it instead (so
    some inputs name things that exist)."""
    if shape is None:
        return st.just({})
    return _valid(shape, seeds or {}, depth=0)


def _valid(shape: Shape, seeds: dict, depth: int, name: str = "") -> st.SearchStrategy:
    if name in seeds:
        return st.one_of(seeds[name], _plain(shape, seeds, depth))
    return _plain(shape, seeds, depth)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.floats(-1e6, 1e6) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def _plain(shape: Shape, seeds: dict, depth: int) -> st.SearchStrategy:
    kind, meta = shape.type_name, shape.metadata
    if kind == "structure" and shape.is_document_type:  # any JSON value
        return JSON_VALUES
    if kind == "structure" and meta.get("union"):  # exactly one member
        return st.one_of(
            *(
                st.fixed_dictionaries({n: _valid(s, seeds, depth + 1, n)})
                for n, s in shape.members.items()
            )
        )
    if kind == "structure":
        required = {
            n: _valid(s, seeds, depth + 1, n)
            for n, s in shape.members.items()
            if n in shape.required_members
        }
        optional = (
            {
                n: _valid(s, seeds, depth + 1, n)
                for n, s in shape.members.items()
                if n not in shape.required_members
            }
            if depth < 4
            else {}
        )
        return st.fixed_dictionaries(required, optional=optional)
    if kind == "list":
        low = meta.get("min", 0)
        return st.lists(
            _valid(shape.member, seeds, depth + 1),
            min_size=low,
            max_size=max(low, min(meta.get("max", MAX_ITEMS), MAX_ITEMS)),
        )
    if kind == "map":
        low = meta.get("min", 0)
        return st.dictionaries(
            _valid(shape.key, seeds, depth + 1),
            _valid(shape.value, seeds, depth + 1),
            min_size=low,
            max_size=max(low, min(meta.get("max", MAX_ITEMS), MAX_ITEMS)),
        )
    if kind == "string":
        if shape.enum:
            return st.sampled_from(shape.enum)
        low, high = meta.get("min", 0), meta.get("max", MAX_TEXT)
        return st.one_of(
            NAMEISH.filter(lambda s: low <= len(s) <= high),
            st.text(min_size=low, max_size=max(low, min(high, MAX_TEXT))),
        )
    if kind in ("integer", "long"):
        return st.integers(min_value=meta.get("min", -(2**31)), max_value=meta.get("max", 2**31))
    if kind in ("float", "double"):
        return st.floats(
            min_value=meta.get("min"),
            max_value=meta.get("max"),
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "timestamp":
        return st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)).map(
            lambda d: d.replace(tzinfo=UTC).timestamp()
        )
    if kind == "blob":
        return st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode())
    raise AssertionError(f"no strategy for {kind}")  # fmt: skip


def paths(shape: Shape, value: Any, path: tuple = ()) -> list[tuple[tuple, Shape]]:
    """Every (path, shape) inside ``value`` (the root included)."""
    found = [(path, shape)]
    if shape.type_name == "structure" and isinstance(value, dict):
        for name, item in value.items():
            if name in shape.members:
                found += paths(shape.members[name], item, (*path, name))
    elif shape.type_name == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            found += paths(shape.member, item, (*path, i))
    return found


def _broken(shape: Shape) -> st.SearchStrategy:
    """Values ``shape`` refuses (or that stretch it)."""
    kind, meta = shape.type_name, shape.metadata
    choices = [JUNK]
    if kind == "string":
        high = meta.get("max")
        choices.append(st.just("x" * ((high or 5000) + 1)))
        if shape.enum:
            choices.append(st.just(shape.enum[0].lower() + "!"))
        choices.append(st.just("\x00"))
        choices.append(st.just("arn:" + "/" * 300))
    if kind in ("integer", "long"):
        choices.append(
            st.sampled_from(
                [meta.get("min", 0) - 1, (meta.get("max") or 2**63) + 1, 2**64, -(2**64), 1.5, "7"]
            )
        )
    if kind == "structure":
        choices.append(st.just([]))
    if kind == "list":
        choices.append(st.just([None]))
        choices.append(st.just(list(range((meta.get("max") or 1000) + 1))))
    if kind == "timestamp":
        choices.append(st.sampled_from([-1, 1e30, "yesterday", float(2**63)]))
    return st.one_of(*choices)  # fmt: skip


@st.composite
def mutated_input(draw, shape: Shape | None, *, seeds: dict[str, Any] | None = None) -> Any:
    """A valid input with one thing broken."""
    value = draw(valid_input(shape, seeds=seeds))
    if shape is None:
        return draw(st.one_of(JUNK, st.just({"Unexpected": 1})))
    value = copy.deepcopy(value)
    path, target = draw(st.sampled_from(paths(shape, value)))
    how = draw(st.sampled_from(["replace", "drop", "unknown", "null"]))
    if not path:  # the whole body
        return draw(st.one_of(JUNK, st.just({**value, "NotAMember": draw(JUNK)})))
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if how == "replace":
        parent[last] = draw(_broken(target))
    elif how == "drop" and isinstance(parent, dict):
        parent.pop(last, None)
    elif how == "unknown" and isinstance(parent[last], dict):
        parent[last]["NotAMember"] = draw(JUNK)
    else:
        parent[last] = None
    return value
