"""What the HTTP server holds a client to (docs/security.md, "Abuse limits"), read once per worker
process from Django's settings and gunicorn's, and the count of open connections per address."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class ServingLimits:
    deadline: float  # seconds for a request's headers and whole body, from its first byte
    per_address: int  # open connections per client address in this process (0: no cap)
    max_body: int  # bytes of a request body (413 past it)
    request_line: int  # bytes of the request line (414 past it); 0: no limit
    header_fields: int  # header fields of a request (431 past it); 0: no limit
    header_field_size: int  # bytes of one header field, name and value (431 past it)

    @classmethod
    def from_settings(cls, settings, cfg) -> ServingLimits:
        """``settings``: Django's; ``cfg``: gunicorn's (its ``limit_request_*`` settings)."""
        per_address = settings.HTTP_MAX_CONNECTIONS_PER_ADDRESS
        if settings.TRUSTED_PROXIES:  # every connection comes from a proxy: it limits clients
            per_address = 0
        return cls(
            deadline=settings.HTTP_REQUEST_DEADLINE_SECONDS,
            per_address=per_address,
            max_body=settings.MAX_REQUEST_BYTES,
            request_line=cfg.limit_request_line,
            header_fields=cfg.limit_request_fields,
            header_field_size=cfg.limit_request_field_size,
        )


class AddressCount:
    """Open connections per client address (one event loop per process: no lock needed)."""

    def __init__(self) -> None:
        self._open: Counter[str] = Counter()

    def admit(self, address: str, limit: int) -> bool:
        if limit and self._open[address] >= limit:
            return False
        self._open[address] += 1
        return True

    def release(self, address: str) -> None:
        self._open[address] -= 1
        if self._open[address] <= 0:
            del self._open[address]

    def open(self, address: str) -> int:
        return self._open[address]
