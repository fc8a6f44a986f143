"""Push windows (aligned to the Unix epoch, UTC) and the deterministic meter event identifier."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
IDENTIFIER_MAX = 100  # Stripe's limit on a meter event identifier


def window_floor(at: datetime, minutes: int) -> datetime:
    """The start of the window of ``minutes`` that contains ``at``."""
    size = minutes * 60
    seconds = int((at - EPOCH).total_seconds())
    return EPOCH + timedelta(seconds=seconds - seconds % size)


def closed_until(now: datetime, minutes: int, grace_minutes: int) -> datetime:
    """Windows that end at or before this time are closed: they ended ``grace`` ago or longer."""
    return window_floor(now - timedelta(minutes=grace_minutes), minutes)


def event_identifier(account_id: str, meter: str, window_start: datetime) -> str:
    """``lw-<account>-<meter>-<window start>``, or its SHA-256 when longer than Stripe allows."""
    stamp = window_start.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
    raw = f"lw-{account_id}-{meter}-{stamp}"
    if len(raw) <= IDENTIFIER_MAX:
        return raw
    return "lw-" + hashlib.sha256(raw.encode()).hexdigest()
