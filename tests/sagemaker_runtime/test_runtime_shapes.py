"""The runtime's request shapes (``controlplane.sagemaker_runtime.shapes``) hold exactly the
service model's rules, read from botocore's own model: every member it declares is accepted,
every required one is required, and every bound and enum is where the model puts it (a value
at the bound passes, one past it is refused naming the member)."""

from __future__ import annotations

import pytest
from botocore.model import Shape
from pydantic import ValidationError

from controlplane.sagemaker_runtime import shapes
from controlplane.sagemaker_sessions.shapes import operation_model

SERVICE = "sagemakertrainingsessionruntime"
CHECKED = {
    "ExecuteTrainingOperation": shapes.ExecuteTrainingOperation,
    "ExecuteSamplingOperation": shapes.ExecuteSamplingOperation,
}


def body_members(operation: str) -> dict[str, Shape]:
    shape = operation_model(SERVICE, operation).input_shape
    return {n: s for n, s in shape.members.items() if "location" not in s.serialization}


def minimal(shape: Shape, path: tuple = (), name: str = "") -> object:
    """The smallest value of ``shape`` (member ``name``) that holds the member ``path`` leads
    to. A document is ``{}``, but a tensor's ``data``: a list of numbers here."""
    kind, meta = shape.type_name, shape.metadata
    if kind == "structure" and shape.is_document_type:
        return [] if name == "data" else {}
    if kind == "structure":
        head = path[0] if path else None
        if meta.get("union"):
            name = head or next(iter(shape.members))
            return {name: minimal(shape.members[name], path[1:])}
        body = [
            n for n in shape.required_members if "location" not in shape.members[n].serialization
        ]
        names = [*body, *([head] if head and head not in body else [])]
        return {n: minimal(shape.members[n], path[1:] if n == head else (), n) for n in names}
    if kind == "list":
        count = max(meta.get("min", 0), 1 if path else 0)
        return [minimal(shape.member, path[1:]) for _ in range(count)]
    if kind == "map":
        return {"target_tokens": minimal(shape.value, path[1:])} if path else {}
    if kind == "string":
        return shape.enum[0] if shape.enum else "a" * max(meta.get("min", 0), 1)
    if kind in ("integer", "long", "double", "float"):
        return meta.get("min", 0) if meta.get("min", 0) > 0 else 0
    if kind == "boolean":
        return False
    raise AssertionError(kind)


def members(shape: Shape, path: tuple = ()) -> list[tuple[tuple, Shape]]:
    """Every member below ``shape`` (lists by their first item, maps by one entry)."""
    found = []
    if shape.type_name == "structure" and not shape.is_document_type:
        for name, member in shape.members.items():
            found += [((*path, name), member), *members(member, (*path, name))]
    elif shape.type_name == "list":
        found += members(shape.member, (*path, 0))
    elif shape.type_name == "map":
        found += members(shape.value, (*path, "target_tokens"))
    return found


def shape_at(shape: Shape, path: tuple) -> Shape:
    for step in path:
        if shape.type_name == "list":
            shape = shape.member
        elif shape.type_name == "map":
            shape = shape.value
        else:
            shape = shape.members[step]
    return shape


def shape_value(body, path: tuple):
    for step in path:
        body = body[step]
    return body


def at(body: dict, path: tuple, value) -> dict:
    node = body
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return body


def refused_at(model, body: dict, path: tuple) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    assert any(tuple(e["loc"][: len(path)]) == path for e in caught.value.errors()), (
        path,
        caught.value.errors(),
    )


CASES = [
    (operation, path, shape)
    for operation in CHECKED
    for name, top in body_members(operation).items()
    for path, shape in [((name,), top), *members(top, (name,))]
]


@pytest.mark.parametrize(("operation", "path", "shape"), CASES, ids=lambda c: str(c))
def test_each_member_as_the_model_says(operation: str, path: tuple, shape: Shape) -> None:
    model = CHECKED[operation]
    top = operation_model(SERVICE, operation).input_shape
    body = minimal(top, path)
    model.model_validate(body)  # the smallest body holding the member fits
    parent, name = shape_at(top, path[:-1]), path[-1]
    union = parent.metadata.get("union")
    if parent.type_name == "structure" and not union and name in parent.required_members:
        broken = minimal(top, path)
        del shape_value(broken, path[:-1])[name]
        refused_at(model, broken, path[:-1])
    meta, kind = shape.metadata, shape.type_name
    if kind in ("integer", "long", "double", "float"):
        for bound, step in (("min", -1), ("max", 1)):
            if bound in meta:
                model.model_validate(at(minimal(top, path), path, meta[bound]))
                beyond = meta[bound] + step * (1 if kind in ("integer", "long") else 1e-6)
                refused_at(model, at(minimal(top, path), path, beyond), path)
    if kind == "string" and shape.enum:
        for value in shape.enum:
            model.model_validate(at(minimal(top, path), path, value))
        refused_at(model, at(minimal(top, path), path, "not-" + shape.enum[0]), path)
    if kind == "string" and "max" in meta:
        model.model_validate(at(minimal(top, path), path, "a" * meta["max"]))
        refused_at(model, at(minimal(top, path), path, "a" * (meta["max"] + 1)), path)


def test_a_union_takes_exactly_one_member() -> None:
    with pytest.raises(ValidationError, match="exactly one member"):
        shapes.ExecuteSamplingOperation.model_validate({"operationConfig": {}})
    body = {"sequenceNumber": 1, "operationConfig": {"saveState": {}, "saveWeights": {}}}
    with pytest.raises(ValidationError, match="exactly one member"):
        shapes.ExecuteTrainingOperation.model_validate(body)
