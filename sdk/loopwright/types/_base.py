"""Base classes for wire types: strict ones for what clients send, lenient ones for answers.

Both are frozen; fields named ``model_*`` are allowed (the protocol uses ``model_id``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["RequestModel", "ResponseModel"]


class RequestModel(BaseModel):
    """A body the client sends: unknown fields are an error, so typos surface early."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        protected_namespaces=(),
        use_attribute_docstrings=True,
    )


class ResponseModel(BaseModel):
    """A body the server answers: unknown fields are dropped, so newer servers stay readable."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        protected_namespaces=(),
        use_attribute_docstrings=True,
    )
