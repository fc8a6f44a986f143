"""Process memory: the resident size, and handing heap memory that was freed back to the OS.

torch allocates CPU tensors with ``malloc``. glibc keeps freed chunks in its arenas (one per
thread that allocated) for reuse; activations, KV caches and checkpoint buffers of ever-changing
sizes fragment them, and the resident size climbs far above what is live. ``malloc_trim`` returns
the free pages. Elsewhere (musl, macOS, Windows) releasing does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable


def resident_bytes() -> int | None:
    """This process's resident set size, or None where ``/proc`` does not tell."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library the process already uses
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def can_release() -> bool:
    return _malloc_trim() is not None


def release_free_heap() -> bool:
    """Return free heap pages of every arena to the OS; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class HeapReleaser:
    """Releases freed heap once the resident size has grown ``slack_bytes`` past where the last
    release (or the lowest size seen since) left it; checking costs one small ``/proc`` read."""

    def __init__(self, slack_bytes: int) -> None:
        self.slack_bytes = slack_bytes
        self.releases = 0
        self._floor = resident_bytes()

    def settle(self, *, force: bool = False) -> None:
        """Call after an operation; ``force``: release whatever the growth (much was freed)."""
        now = resident_bytes()
        if now is None:
            return
        floor = now if self._floor is None else self._floor
        if force or now - floor > self.slack_bytes:
            if release_free_heap():
                self.releases += 1
                now = resident_bytes() or now
            self._floor = now  # what is left is live (or fragments no release can return)
        else:
            self._floor = min(floor, now)
