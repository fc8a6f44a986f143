"""Tokens of a sample operation as its worker draws them, over PostgreSQL ``NOTIFY``.

An operation whose payload holds ``"stream": true`` has its tokens sent on a channel of its own
(``channel``), a few at a time, each notice under PostgreSQL's 8,000-byte limit. A notice is a
JSON list of ``[sample, position, token, logprob, top]`` (``top``: null, or the most likely
tokens as ``[[token, logprob], ...]``). Notices can be missed (sent before a listener, dropped
with a connection): whoever streams them fills gaps from the completed operation, which stays
the truth. Elsewhere (SQLite) there are no notices, and a stream is sent once the request is done.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings

CHANNEL_PREFIX = "lw_tokens_"
NOTICE_LIMIT = 7900  # bytes of payload per notice (PostgreSQL refuses 8,000 and more)
STREAM_KEY = "stream"

Entry = tuple[int, int, int, float, list | None]  # sample, position, token, logprob, top


def available() -> bool:
    """Whether workers send tokens as they draw them (PostgreSQL, with notices on)."""
    return (
        settings.STREAM_TOKENS
        and settings.NOTIFY_ON_COMPLETION
        and settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    )


def channel(request_id: str) -> str:
    return CHANNEL_PREFIX + request_id


def wants_stream(payload: dict) -> bool:
    return payload.get(STREAM_KEY) is True


def notices(entries: Iterable[Entry]) -> Iterator[str]:
    """The entries as notice payloads, in order, each under ``NOTICE_LIMIT`` bytes."""
    parts: list[str] = []
    size = 2
    for entry in entries:
        part = json.dumps(entry, separators=(",", ":"))
        if parts and size + len(part) + 1 > NOTICE_LIMIT:
            yield "[" + ",".join(parts) + "]"
            parts, size = [], 2
        parts.append(part)
        size += len(part) + 1
    if parts:
        yield "[" + ",".join(parts) + "]"


def parse(payload: str) -> list[Entry]:
    """A notice's entries; a malformed one raises ``ValueError``."""
    raw: Any = json.loads(payload)
    if not isinstance(raw, list):
        raise ValueError("a token notice is a list")
    out: list[Entry] = []
    for item in raw:
        sample, position, token, logprob, top = item
        if not all(isinstance(v, int) for v in (sample, position, token)):
            raise ValueError("sample, position and token are integers")
        tops = None if top is None else [(int(t), float(lp)) for t, lp in top]
        out.append((sample, position, token, float(logprob), tops))
    return out
