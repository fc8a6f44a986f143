"""Glob matching with ``*`` (any run of characters) and ``?`` (one character), as in IAM policies,
in time linear in the text: the pattern runs as a bit-parallel automaton, one step per character,
never backtracking. ``LITERAL_STAR``/``LITERAL_QMARK`` encode a ``*``/``?`` that matches only
itself (from ``${*}``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

LITERAL_STAR = "\ue000"
LITERAL_QMARK = "\ue001"

_LITERALS = {LITERAL_STAR: "*", LITERAL_QMARK: "?"}


def has_wildcard(pattern: str) -> bool:
    """Whether ``pattern`` contains an active ``*`` or ``?``."""
    return "*" in pattern or "?" in pattern


def wildcard_count(pattern: str) -> int:
    """How many active ``*`` and ``?`` ``pattern`` holds."""
    return pattern.count("*") + pattern.count("?")


def literal(text: str) -> str:
    """Encode ``text`` so that its ``*`` and ``?`` match only themselves."""
    return text.replace("*", LITERAL_STAR).replace("?", LITERAL_QMARK)


def unescape(pattern: str) -> str:
    """The plain text of a pattern, for exact comparisons (encoded literals become ``*``/``?``)."""
    return pattern.replace(LITERAL_STAR, "*").replace(LITERAL_QMARK, "?")


@dataclass(frozen=True)
class _Automaton:
    """Bit ``i`` of a state: the text read so far matches the first ``i`` pattern items.
    ``advance[c]``: items that ``c`` moves past (that literal, or ``?``); ``stars``: ``*`` items,
    which keep their bit on any character and also set the next one (matching nothing)."""

    advance: dict[str, int]
    any_char: int  # the ? items: what a character absent from ``advance`` moves past
    stars: int
    start: int
    accept: int


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> _Automaton:
    items: list[str] = []
    for char in pattern:
        if not (char == "*" and items and items[-1] == "*"):  # ** is *
            items.append(char)
    advance: dict[str, int] = {}
    any_char = stars = 0
    for position, item in enumerate(items):
        bit = 1 << position
        if item == "*":
            stars |= bit
        elif item == "?":
            any_char |= bit
        else:
            char = _LITERALS.get(item, item)
            advance[char] = advance.get(char, 0) | bit
    for char in advance:
        advance[char] |= any_char
    start = 1 | ((1 & stars) << 1)
    return _Automaton(advance, any_char, stars, start, 1 << len(items))


def _run(automaton: _Automaton, text: str) -> tuple[bool, int]:
    """Whether ``text`` matches, and the steps taken (one per character read, at most
    ``len(text)``; each step is a fixed handful of operations on ``len(pattern) + 1`` bits)."""
    advance, any_char, stars = automaton.advance, automaton.any_char, automaton.stars
    state, steps = automaton.start, 0
    for char in text:
        steps += 1
        moved = (state & advance.get(char, any_char)) << 1
        state = moved | (state & stars)
        state |= (state & stars) << 1  # a * reached may match nothing (no two stars in a row)
        if not state:
            break
    return bool(state & automaton.accept), steps


def glob_match(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Whether the whole of ``text`` matches ``pattern``; ``ignore_case`` lower-cases both sides."""
    if ignore_case:
        pattern, text = pattern.lower(), text.lower()
    if not has_wildcard(pattern):
        return unescape(pattern) == text
    if pattern == "*":
        return True
    return _run(_compile(pattern), text)[0]


def glob_steps(pattern: str, text: str) -> tuple[bool, int]:
    """``glob_match`` (case-sensitive) through the automaton, with the steps it took."""
    return _run(_compile(pattern), text)
