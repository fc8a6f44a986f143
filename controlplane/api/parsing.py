"""Read a request: its body validated with the SDK's wire types (the single schema), its fields
and query parameters within their bounds. Who may do what is ``controlplane.edge.callers``."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel
from rest_framework.exceptions import ParseError
from rest_framework.request import Request

M = TypeVar("M", bound=BaseModel)


def body_object(request: Request) -> dict:
    """The request body, which must be a JSON object."""
    data = request.data
    if not isinstance(data, dict):
        raise ParseError("the request body must be a JSON object")
    return data


def parse(request: Request, model: type[M]) -> M:
    return model.model_validate(body_object(request))


def public(result: dict | None) -> dict:
    """An operation's result without the worker's internal keys."""
    return {k: v for k, v in (result or {}).items() if not k.startswith("_")}


def body_of(request: Request, model: type[BaseModel]) -> dict:
    """The JSON object body, validated by ``model`` (an unknown field, a wrong type or size is
    a 400 naming it), as the fields the client set."""
    return model.model_validate(body_object(request)).model_dump(exclude_unset=True)


def text(body: dict, name: str, limit: int, *, required: bool = True, default: str = "") -> str:
    """A string field of at most ``limit`` characters; a required one is not empty."""
    from controlplane.errors import DomainError

    value = body.get(name)
    if value is None:
        if required:
            raise DomainError(f"{name} is required", field=name)
        return default
    if not isinstance(value, str):
        raise DomainError(f"{name}: must be a string", field=name)
    if len(value) > limit:
        raise DomainError(f"{name}: at most {limit} characters", field=name)
    if required and not value.strip():
        raise DomainError(f"{name}: must not be empty", field=name)
    return value


def query_int(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    """An integer query parameter within [low, high] (400 naming it otherwise)."""
    from controlplane.errors import DomainError

    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise DomainError(f"{name}: must be an integer", field=name) from None
    if not low <= value <= high:
        raise DomainError(f"{name}: between {low} and {high}", field=name)
    return value
