"""How many CPU threads an operation's engine call gets.

torch runs each op on every core it is given; for very small calls (a few tokens through a
small model) the threads cost more than they save: one thread is as fast, and the others, which
keep spinning for a while after each parallel region, take the cores the control plane and the
database need at that moment. Calls whose work (tokens × parameters) is below ``SMALL_WORK`` run
on one thread; the rest on the process's usual number. Only on CPU; accelerators are untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

SMALL_WORK = 1e9
"""tokens × base-model parameters under which one thread is faster than two: a ~1M-parameter
model's calls up to about 1,200 tokens (8 sessions' packed forward_backward of 32 or 128 tokens
each took 80 against 120 ms and 47 against 64 ms on one and two threads, on two cores that the
control plane and the database share); SmolLM2-135M's up to 7 tokens."""


def threads_for(tokens: int, parameters: int, usual: int) -> int:
    return 1 if tokens * parameters < SMALL_WORK else usual


@contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """Run the block with ``count`` torch threads, then restore the previous number."""
    previous = torch.get_num_threads()
    if count == previous:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
