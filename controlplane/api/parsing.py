"""Validate a request body with the SDK's wire types (the single schema)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel
from rest_framework.exceptions import ParseError
from rest_framework.request import Request

M = TypeVar("M", bound=BaseModel)


def parse(request: Request, model: type[M]) -> M:
    data = request.data
    if not isinstance(data, dict):
        raise ParseError("the request body must be a JSON object")
    return model.model_validate(data)


def tenant_of(request: Request):
    return request.user.tenant


def public(result: dict | None) -> dict:
    """An operation's result without the worker's internal keys."""
    return {k: v for k, v in (result or {}).items() if not k.startswith("_")}
