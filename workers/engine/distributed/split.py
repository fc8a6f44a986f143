"""How a request's datums are divided among ranks: by token count, each datum whole on one rank."""

from __future__ import annotations

from collections.abc import Sequence


def split_by_tokens(lengths: Sequence[int], ranks: int) -> list[list[int]]:
    """Datum indices per rank, each list ascending. Longest first, each datum goes to the rank
    holding the fewest tokens so far (then the fewest datums, then the lowest rank): the same
    answer on every call, and no rank holds more than the lightest one plus the longest datum.
    A rank may get nothing (fewer datums than ranks)."""
    if ranks < 1:
        raise ValueError(f"ranks must be ≥ 1, got {ranks}")
    shares: list[list[int]] = [[] for _ in range(ranks)]
    tokens = [0] * ranks
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(ranks), key=lambda r: (tokens[r], len(shares[r]), r))
        shares[r].append(i)
        tokens[r] += lengths[i]
    return [sorted(s) for s in shares]
