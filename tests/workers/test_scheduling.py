"""The pass scheduler's policy on its own: packing under the token budget, operations that run
alone, the round-robin across tenants and their models, and that nobody waits for ever."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.scheduling import MEMORY, PACKED_KINDS, Scheduler, Work, round_robin


def work(key: str, tenant: str, owner: str | None = None, kind="forward_backward", tokens=10):
    return Work(key, tenant, owner or f"{tenant}-m", kind, tokens)


def keys(batches) -> list[list[str]]:
    return [[w.key for w in b.items] for b in batches]


def test_one_kind_packs_into_calls_within_the_budget() -> None:
    items = [work(f"o{i}", f"t{i}", tokens=40) for i in range(5)]
    batches = Scheduler(budget=100).plan(items)
    assert keys(batches) == [["o0", "o1"], ["o2", "o3"], ["o4"]]
    assert all(b.tokens <= 100 and not b.alone for b in batches)


def test_kinds_never_share_a_call_and_training_runs_before_samples() -> None:
    items = [
        work("s", "a", "sampler", kind="sample"),
        work("fb", "b"),
        work("opt", "c", kind="optim_step", tokens=0),
        work("fwd", "d", kind="forward"),
        work("fb2", "e"),
    ]
    batches = Scheduler(budget=1000).plan(items)
    assert [(b.kind, [w.key for w in b.items]) for b in batches] == [
        ("forward_backward", ["fb", "fb2"]),
        ("optim_step", ["opt"]),
        ("forward", ["fwd"]),
        ("sample", ["s"]),
    ]


def test_other_kinds_run_alone_in_their_turn() -> None:
    items = [
        work("save", "a", kind="save_weights", tokens=0),
        work("fb", "b"),
        work("create", "c", kind="create_model", tokens=0),
        work("fb2", "d"),
    ]
    batches = Scheduler(budget=1000).plan(items)
    assert keys(batches) == [["save"], ["fb", "fb2"], ["create"]]
    assert [b.alone for b in batches] == [True, False, True]


def test_an_operation_over_the_budget_runs_alone_after_the_others() -> None:
    """A huge batch never makes another call larger than the budget, nor holds the small ones
    of the same pass behind it, wherever the round-robin puts its tenant."""
    scheduler = Scheduler(budget=100)
    for _ in range(4):  # whichever tenant goes first
        items = [work("huge", "a", tokens=5000), work("b1", "b"), work("c1", "c")]
        batches = scheduler.plan(items)
        assert keys(batches)[-1] == ["huge"] and batches[-1].oversize
        assert sorted(keys(batches)[0]) == ["b1", "c1"]


def test_round_robin_across_tenants_then_their_models() -> None:
    items = [work(f"a{i}", "a", f"a-m{i}") for i in range(3)] + [work("b0", "b", "b-m0")]
    ordered = [w.key for w in Scheduler(budget=1000).order(items)]
    assert ordered == ["a0", "b0", "a1", "a2"]  # one of each tenant per turn


def test_the_first_place_rotates_from_pass_to_pass() -> None:
    scheduler = Scheduler(budget=1000)
    firsts = Counter()
    seconds = Counter()
    for _ in range(30):
        items = [work(f"{t}{m}", t, f"{t}-m{m}") for t in "abc" for m in range(2)]
        ordered = scheduler.order(items)
        firsts[ordered[0].tenant] += 1
        seconds[ordered[0].owner] += 1
    assert firsts == {"a": 10, "b": 10, "c": 10}
    # within a tenant, its models take turns at going first too
    assert seconds == {"a-m0": 5, "a-m1": 5, "b-m0": 5, "b-m1": 5, "c-m0": 5, "c-m1": 5}


def test_what_it_remembers_stays_bounded_however_many_tenants_come_and_go() -> None:
    scheduler = Scheduler(budget=1000)
    for t in range(MEMORY + 10):  # each pass a new tenant, never seen again
        scheduler.order([work(f"k{t}", f"t{t}", f"t{t}-m0"), work(f"j{t}", f"t{t}", f"t{t}-m1")])
    assert len(scheduler._owner) <= MEMORY + 1
    # a tenant that stays keeps its rotation
    firsts = {scheduler.order([work("a", "x", "x-m0"), work("b", "x", "x-m1")])[0].owner
              for _ in range(2)}  # fmt: skip
    assert firsts == {"x-m0", "x-m1"}


def test_round_robin_starts_after_the_last_start_even_when_it_is_gone() -> None:
    groups = {"a": [1], "c": [3], "d": [4]}
    assert round_robin(groups, after="b") == [3, 4, 1]
    assert round_robin(groups, after="d") == [1, 3, 4]
    assert round_robin(groups, after=None) == [1, 3, 4]


def test_a_budget_below_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Scheduler(budget=0)


def test_a_flooding_tenant_does_not_starve_another() -> None:
    """Tenant a has 50 of its models' operations waiting every pass, tenant b one: b's runs in
    the first call of every pass, never behind a's whole backlog."""
    scheduler = Scheduler(budget=100)
    for _ in range(10):
        items = [work(f"a{i}", "a", f"a-m{i}", tokens=20) for i in range(50)]
        items.append(work("b", "b", tokens=20))
        first_call = scheduler.plan(items)[0]
        assert "b" in [w.key for w in first_call.items]


kinds = st.sampled_from([*PACKED_KINDS, "save_weights", "create_model"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abcd"), st.integers(0, 3), kinds, st.integers(0, 300)),
        max_size=40,
    ),
    st.integers(1, 400),
)
def test_every_operation_runs_once_in_a_call_that_respects_the_rules(raw, budget) -> None:
    items = [work(f"o{i}", t, f"{t}{m}", k, n) for i, (t, m, k, n) in enumerate(raw)]
    batches = Scheduler(budget).plan(items)
    assert sorted(w.key for b in batches for w in b.items) == sorted(w.key for w in items)
    for b in batches:
        assert {w.kind for w in b.items} == {b.kind}
        if len(b.items) > 1:
            assert b.kind in PACKED_KINDS and b.tokens <= budget
        if b.kind not in PACKED_KINDS or b.items[0].tokens > budget:
            assert b.alone and len(b.items) == 1
    # an owner's operations keep their order (a sampler's samples, oldest first)
    position = {w.key: n for n, b in enumerate(batches) for w in b.items}
    for owner in {w.owner for w in items}:
        mine = [w for w in items if w.owner == owner and w.kind == "sample"]
        mine = [w for w in mine if w.tokens <= budget]
        assert [position[w.key] for w in mine] == sorted(position[w.key] for w in mine)
