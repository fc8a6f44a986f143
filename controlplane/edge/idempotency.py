"""The ``Idempotency-Key`` header the sampling faces take: a retried request with the same key
runs once (``controlplane.completions.services``)."""

from __future__ import annotations

from controlplane.errors import DomainError

IDEMPOTENCY_KEY_LIMIT = 255


def idempotency_key(request) -> str | None:
    """The ``Idempotency-Key`` header: 1 to 255 visible ASCII characters, or absent."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not 0 < len(key) <= IDEMPOTENCY_KEY_LIMIT or not all(33 <= ord(c) <= 126 for c in key):
        raise DomainError(
            f"Idempotency-Key: 1 to {IDEMPOTENCY_KEY_LIMIT} visible ASCII characters",
            field="Idempotency-Key",
        )
    return key
