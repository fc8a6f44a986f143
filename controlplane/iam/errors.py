"""The error raised for an invalid policy document, located by a JSON path."""

from __future__ import annotations


class PolicyError(ValueError):
    """``field`` is a JSON path such as ``Statement[1].Condition`` ("" for the whole document)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
