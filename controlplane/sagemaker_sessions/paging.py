"""``NextToken``: an opaque cursor (base64url of a small JSON object) that says where the next
page starts; one that does not decode, or is not this list's, is a ``ShapeError`` naming it."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from .shapes import ShapeError

MAX_TOKEN = 1024


def token_of(kind: str, cursor: dict[str, Any]) -> str:
    raw = json.dumps({"k": kind, **cursor}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def cursor_of(kind: str, token: str | None) -> dict[str, Any] | None:
    """The cursor a token of list ``kind`` carries; None for no token."""
    if not token:
        return None
    if len(token) > MAX_TOKEN:
        raise ShapeError("NextToken", "is invalid (not a token this list gave)")
    try:
        found = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        found = None
    if not isinstance(found, dict) or found.pop("k", None) != kind:
        raise ShapeError("NextToken", "is invalid (not a token this list gave)")
    return found


def offset_of(kind: str, token: str | None, *, limit: int = 10**6) -> int:
    """The offset an offset-paged list's token carries (0 without one)."""
    cursor = cursor_of(kind, token)
    if cursor is None:
        return 0
    offset = cursor.get("o")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= limit:
        raise ShapeError("NextToken", "is invalid (not a token this list gave)")
    return offset
