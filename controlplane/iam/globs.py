"""Glob matching with ``*`` (any run of characters) and ``?`` (one character), as in IAM policies.

``LITERAL_STAR``/``LITERAL_QMARK`` encode a ``*``/``?`` that matches only itself (from ``${*}``).
"""

from __future__ import annotations

import re
from functools import lru_cache

LITERAL_STAR = "\ue000"
LITERAL_QMARK = "\ue001"

_TRANSLATION = {
    "*": ".*",
    "?": ".",
    LITERAL_STAR: re.escape("*"),
    LITERAL_QMARK: re.escape("?"),
}


def has_wildcard(pattern: str) -> bool:
    """Whether ``pattern`` contains an active ``*`` or ``?``."""
    return "*" in pattern or "?" in pattern


def literal(text: str) -> str:
    """Encode ``text`` so that its ``*`` and ``?`` match only themselves."""
    return text.replace("*", LITERAL_STAR).replace("?", LITERAL_QMARK)


def unescape(pattern: str) -> str:
    """The plain text of a pattern, for exact comparisons (encoded literals become ``*``/``?``)."""
    return pattern.replace(LITERAL_STAR, "*").replace(LITERAL_QMARK, "?")


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str]:
    body = "".join(_TRANSLATION.get(char) or re.escape(char) for char in pattern)
    return re.compile(body, re.DOTALL)


def glob_match(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Whether the whole of ``text`` matches ``pattern``; ``ignore_case`` lower-cases both sides."""
    if ignore_case:
        pattern, text = pattern.lower(), text.lower()
    return _compile(pattern).fullmatch(text) is not None
