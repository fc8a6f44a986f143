"""Cursor: the offset-based page position that list endpoints answer with."""

from __future__ import annotations

from ._base import ResponseModel

__all__ = ["Cursor"]


class Cursor(ResponseModel):
    """Where a page sits in a list."""

    offset: int
    """Index of the page's first item."""

    limit: int
    """Most items per page that were asked for."""

    total_count: int
    """Number of items in the whole list."""
