"""Where an element of a JSON document is written: the line of ``Statement[1].Effect`` in the
text a person typed, so an editor can mark the line an error names (or the line of a syntax
error). The text is read as JSON once, keeping the line each key and value starts on."""

from __future__ import annotations

import json
import re

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_PART = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.lines: dict[tuple, int] = {}  # path → the line (1-based) its value starts on

    def line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def skip(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()

    def value(self, path: tuple) -> None:
        self.skip()
        self.lines.setdefault(path, self.line())
        char = self.text[self.pos : self.pos + 1]
        if char == "{":
            self._object(path)
        elif char == "[":
            self._array(path)
        elif char == '"':
            self._string()
        else:
            for word in ("true", "false", "null"):
                if self.text.startswith(word, self.pos):
                    self.pos += len(word)
                    return
            found = _NUMBER.match(self.text, self.pos)
            if not found:
                raise ValueError("not JSON")
            self.pos = found.end()

    def _string(self) -> str:
        value, end = json.decoder.scanstring(self.text, self.pos + 1)
        self.pos = end
        return value

    def _object(self, path: tuple) -> None:
        self.pos += 1
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return
        while True:
            self.skip()
            key_line = self.line()
            key = self._string()
            self.lines.setdefault((*path, key), key_line)
            self.skip()
            self.pos += 1  # the colon
            self.value((*path, key))
            self.skip()
            char = self.text[self.pos]
            self.pos += 1
            if char == "}":
                return

    def _array(self, path: tuple) -> None:
        self.pos += 1
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return
        index = 0
        while True:
            self.value((*path, index))
            self.skip()
            char = self.text[self.pos]
            self.pos += 1
            if char == "]":
                return
            index += 1


def parse_path(path: str) -> tuple:
    """``Statement[1].Action[0]`` → ("Statement", 1, "Action", 0)."""
    return tuple(
        int(index) if index else name for name, index in _PART.findall(path) if name or index
    )


def error_line(text: str, path: str | None) -> int | None:
    """The line to mark for an error at ``path`` in ``text``: a syntax error's own line, else
    the line of the deepest part of ``path`` that is written there (a single statement written
    as an object is found as ``Statement[0]``); None when ``text`` says nothing about it."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.lineno
    except ValueError:
        return None
    reader = _Reader(text)
    try:
        reader.value(())
    except (ValueError, IndexError):
        return None
    parts = parse_path(path or "")
    while parts:
        for candidate in (parts, tuple(p for p in parts if p != 0)):
            if candidate in reader.lines:
                return reader.lines[candidate]
        parts = parts[:-1]
    return None
