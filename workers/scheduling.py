"""Which of a pass's claimed operations share one engine call, and in which order the calls run.

Pure policy, no Django and no engine: operations of a kind the engine runs for many sessions
at once are packed into calls of at most ``budget`` tokens; an operation larger than the
budget, or of a kind that does not pack, runs alone. The order is a round-robin across
tenants, and within a tenant across its models and samplers, starting one tenant further on
every pass, so no one always goes first.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

PACKED_KINDS = ("forward_backward", "forward", "optim_step", "sample")
"""Kinds the engine runs for many sessions in one call (``*_many``); the others run alone."""

TRAINING_FIRST = ("sample",)
"""Kinds that run after a pass's training operations (a sample from a model's live weights sees
that pass's steps, as when the worker ran one operation at a time)."""

MEMORY = 4096
"""Tenants whose round-robin start the scheduler remembers beyond the current pass's."""

_K = TypeVar("_K", bound=Hashable)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Work:
    """One claimed operation, as the policy sees it."""

    key: str  # the operation's id
    tenant: str
    owner: str  # the training model or sampler it belongs to
    kind: str
    tokens: int  # what it puts through the model (0: not counted in tokens)


@dataclass
class Batch:
    """Operations that run in one engine call (``alone``: a call of its own)."""

    kind: str
    items: list[Work] = field(default_factory=list)
    alone: bool = False
    oversize: bool = False  # alone because it is larger than the budget

    @property
    def tokens(self) -> int:
        return sum(w.tokens for w in self.items)


def round_robin(groups: dict[_K, list[_T]], after: _K | None) -> list[_T]:
    """The groups' items interleaved: the first of every group, then the second of every
    group, …; groups in sorted order starting with the first one after ``after``."""
    keys = sorted(groups, key=str)
    if after is not None:
        later = [k for k in keys if str(k) > str(after)]
        keys = later + [k for k in keys if str(k) <= str(after)]
    out: list[_T] = []
    depth = max((len(v) for v in groups.values()), default=0)
    for turn in range(depth):
        out += [groups[k][turn] for k in keys if turn < len(groups[k])]
    return out


def _grouped(items: Iterable[_T], key) -> dict:
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


class Scheduler:
    """Plans each pass; remembers where the round-robin started last time."""

    def __init__(self, budget: int) -> None:
        if budget < 1:
            raise ValueError(f"the pass token budget must be at least 1, not {budget}")
        self.budget = budget
        self._tenant: str | None = None  # the tenant that went first last pass
        self._owner: dict[str, str] = {}  # per tenant: its owner that went first last time

    def order(self, items: Sequence[Work]) -> list[Work]:
        """``items`` (each owner's oldest first) in round-robin order; moves the starts on."""
        per_tenant = {}
        for tenant, work in _grouped(items, lambda w: w.tenant).items():
            owners = _grouped(work, lambda w: w.owner)
            per_tenant[tenant] = round_robin(owners, self._owner.get(tenant))
            self._owner[tenant] = per_tenant[tenant][0].owner
        if len(self._owner) > MEMORY:  # tenants long gone: keep only this pass's
            self._owner = {t: o for t, o in self._owner.items() if t in per_tenant}
        ordered = round_robin(per_tenant, self._tenant)
        if ordered:
            self._tenant = ordered[0].tenant
        return ordered

    def plan(self, items: Sequence[Work]) -> list[Batch]:
        """The engine calls of one pass, in the order they run: training before samples; within
        each, the calls in the round-robin order of their first operation, except operations
        larger than the budget, which run alone after the others (they never hold the rest
        of the pass behind them)."""
        batches: list[Batch] = []
        open_: dict[str, Batch] = {}
        for work in self.order(items):
            if work.kind not in PACKED_KINDS:
                batches.append(Batch(work.kind, [work], alone=True))
                continue
            if work.tokens > self.budget:
                batches.append(Batch(work.kind, [work], alone=True, oversize=True))
                continue
            current = open_.get(work.kind)
            if current is None or current.tokens + work.tokens > self.budget:
                current = open_[work.kind] = Batch(work.kind)
                batches.append(current)
            current.items.append(work)
        rank = {id(b): n for n, b in enumerate(batches)}
        return sorted(batches, key=lambda b: (b.kind in TRAINING_FIRST, b.oversize, rank[id(b)]))
