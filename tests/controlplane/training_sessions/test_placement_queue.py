"""The placement queue: creates no worker can take wait in one order, first in first out within
an account and fair across accounts (each gets its share of slot time); a create's place in
line and likely start through the API; a cancelled create leaves the queue; a worker's arrival
or departure runs placement in the queue's order; quotas still refuse; charlie sees none of it.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.fleet.models import Worker
from controlplane.operations.session_end import sessions_expire_idle
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from controlplane.training_sessions.services import failover
from controlplane.training_sessions.services.queue import Entry, fair_order
from tests import people as people_
from tests.support.callers import calling
from tests.support.tiny_worker import TINY
from tests.support.wire import open_session
from workers.runtime import WorkerRuntime, WorkerSettings

pytestmark = pytest.mark.django_db

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
SUBNET = "subnet-0a1b2c3d"
SG = "sg-0123abcd"


@pytest.fixture
def dora(db):
    """The owner of a third account, competing with alice's for the same workers."""
    return calling(people_.owner("dora", "initech"))


@pytest.fixture
def clock(monkeypatch):
    """Django's clock, moved by the test (the database's own, for leases, runs on)."""
    now = [T0]
    monkeypatch.setattr(timezone, "now", lambda: now[0])

    class Clock:
        def advance(self, seconds: float) -> None:
            now[0] += timedelta(seconds=seconds)

        @property
        def now(self) -> datetime:
            return now[0]

    return Clock()


def queued(person, session_id: str | None = None, seq: int = 0) -> dict:
    """create_model's future, in a session of its own unless given one; not run."""
    sid = session_id or open_session(person)
    r = person.post(
        "create_model",
        {
            "session_id": sid,
            "model_seq_id": seq,
            "base_model": TINY,
            "lora_config": {"rank": 4, "seed": 0},
        },
    )
    assert r.status_code == 200, r.content
    return {**r.json(), "session_id": sid}


def info(person, model_id: str) -> dict:
    r = person.post("get_info", {"model_id": model_id})
    assert r.status_code == 200, r.content
    return r.json()


def entries(*rows: tuple[str, int, int]) -> list[Entry]:
    return [Entry(name, tenant, T0 + timedelta(seconds=at)) for name, tenant, at in rows]


# -- the order -------------------------------------------------------------------------------
def test_the_order_is_first_in_first_out_per_account_and_fair_across_accounts() -> None:
    backlog = entries(("a1", 1, 0), ("a2", 1, 1), ("a3", 1, 2), ("b1", 2, 10), ("b2", 2, 11))
    # nobody has had a slot: turns alternate, the earlier head first
    assert [e.id for e in fair_order(backlog, {})] == ["a1", "b1", "a2", "b2", "a3"]
    # account 1 holds two slots likely to take 100 s each: account 2's go ahead of its backlog
    assert [e.id for e in fair_order(backlog, {1: 2}, hold=100)] == ["b1", "b2", "a1", "a2", "a3"]
    # slot time had lately counts too: account 2 had 150 s more, so account 1 takes two turns
    order = fair_order(backlog, {}, {1: 100.0, 2: 250.0}, hold=100)
    assert [e.id for e in order] == ["a1", "a2", "b1", "a3", "b2"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 50)), max_size=30),
    st.dictionaries(st.integers(1, 4), st.integers(0, 5)),
    st.dictionaries(st.integers(1, 4), st.integers(0, 5000)),
    st.sampled_from([0.0, 60.0, 600.0]),
)
def test_every_next_model_is_the_oldest_of_the_account_with_least_slot_time(
    rows, held, used, hold
) -> None:
    backlog = entries(*((f"m{i}", tenant, at) for i, (tenant, at) in enumerate(rows)))
    order = fair_order(backlog, held, {t: float(u) for t, u in used.items()}, hold)
    assert sorted(e.id for e in order) == sorted(e.id for e in backlog)  # each one, once
    slots = Counter(held)
    left = Counter(e.tenant_id for e in backlog)

    def time(tenant: int) -> tuple[float, int]:
        return used.get(tenant, 0) + slots[tenant] * hold, slots[tenant]

    for i, entry in enumerate(order):
        mine = [e for e in order[i:] if e.tenant_id == entry.tenant_id]
        assert entry == min(mine, key=lambda e: (e.created_at, e.id))  # FIFO in the account
        rivals = [t for t in left if left[t] and t != entry.tenant_id]
        assert all(time(entry.tenant_id) <= time(t) for t in rivals)  # least slot time first
        slots[entry.tenant_id] += 1
        left[entry.tenant_id] -= 1


# -- slot time -------------------------------------------------------------------------------
@pytest.mark.parametrize("slots", [2, 3])
def test_each_account_gets_its_fair_share_of_slot_time(
    alice, dora, runtime, clock, settings, slots
) -> None:
    """Two accounts with backlogs on a fleet of few slots, alice's sessions three times as
    long as dora's, alice's holding every slot when dora's arrive: while both wait, each
    account holds half the slot time (±10 %). First come, first served would give dora none
    of it until alice's backlog ran out; taking turns by sessions would give alice three
    quarters."""
    settings.MAX_CONCURRENT_SESSIONS = 50
    Worker.objects.update(capacity=slots)
    holds = {alice.tenant.pk: 3, dora.tenant.pk: 1}  # minutes each of its sessions trains
    people = {alice.tenant.pk: alice, dora.tenant.pk: dora}
    for person, n in ((alice, 10), (dora, 30)):
        for _ in range(n):
            queued(person)
            clock.advance(1)
    runtime.drain()
    held = TrainingModel.objects.filter(worker__isnull=False)
    assert {m.tenant_id for m in held} == {alice.tenant.pk} and len(held) == slots
    age: Counter = Counter()
    share: Counter = Counter()
    for _minute in range(200):
        runtime.beat()  # placement in the queue's order, as every heartbeat does
        runtime.drain()  # the models it placed are created
        placed = list(
            TrainingModel.objects.filter(worker__isnull=False, state=TrainingModel.State.READY)
        )
        assert len(placed) <= slots
        waiting = set(
            TrainingModel.objects.filter(worker__isnull=True, placement__in=TrainingModel.WAITING)
            .values_list("tenant_id", flat=True)
            .distinct()
        )
        if len(waiting) == 2:
            share.update(m.tenant_id for m in placed)
        if not placed and not waiting:
            break
        clock.advance(60)
        for m in placed:
            age[m.pk] += 1
            if age[m.pk] == holds[m.tenant_id]:
                r = people[m.tenant_id].post("unload_model", {"model_id": m.pk})
                assert r.status_code == 200, r.content
        runtime.drain()  # the unloads run: their slots are free for the next beat
    assert not TrainingModel.objects.filter(worker__isnull=True, state="creating").exists()
    total = sum(share.values())
    assert total >= 10 * slots, share  # long enough a contest to measure
    alices = share[alice.tenant.pk] / total
    assert 0.4 <= alices <= 0.6, (alices, share)


# -- place in line and likely start ------------------------------------------------------------
def test_place_in_line_and_likely_start_through_the_api(alice, dora, charlie, runtime, clock):
    Worker.objects.update(capacity=1)
    first = queued(alice)  # learned from: it holds the slot 100 s
    runtime.drain()
    clock.advance(100)
    assert alice.post("unload_model", {"model_id": first["model_id"]}).status_code == 200
    runtime.drain()
    holder = queued(alice)  # placed now, at T0 + 100 s: its slot is likely free at T0 + 200 s
    runtime.drain()
    clock.advance(10)
    second = queued(alice)
    clock.advance(1)
    third = queued(alice)
    clock.advance(1)
    first_of_dora = queued(dora)
    clock.advance(1)
    now = clock.now
    frees = T0 + timedelta(seconds=200)
    # create_model's handle says where it stood as it was made (none for a placed one)
    assert "queue" not in holder and (second["queue"]["position"], third["queue"]["position"]) == (
        1,
        2,
    )

    def place(person, fut) -> dict:
        return info(person, fut["model_id"])["queue"]

    # dora holds no slot: her first model goes ahead of alice's backlog
    expected = {
        first_of_dora["model_id"]: (dora, 1, 0),
        second["model_id"]: (alice, 2, 100),
        third["model_id"]: (alice, 3, 200),
    }
    for model_id, (person, position, seconds) in expected.items():
        q = place(person, {"model_id": model_id})
        assert (q["position"], q["waiting"], q["waits_for"], q["kind"]) == (
            position,
            3,
            "capacity",
            "model",
        )
        assert q["reason"] == (
            f"waiting for a free slot on an open-network worker: 1 serves {TINY}, it is full"
        )
        start = datetime.fromisoformat(q["estimated_start_at"])
        assert start == frees + timedelta(seconds=seconds), (position, start - now)
        assert q["estimate_basis"] == (
            f"models of {TINY} held a slot 100 s on average (the last 1 that ended); "
            "1 slot on the workers it may use"
        )
    # the same place in the session, and in its create_model future's try_again
    session = alice.get(f"sessions/{second['session_id']}").json()
    assert session["queue"] == place(alice, second)
    # SageMaker-style: Pending, with why and where it stands
    assert session["TrainingSessionStatus"] == "Pending" and session["BlockedReason"] is None
    assert session["PendingReason"].startswith("waiting for a free slot on an open-network")
    assert "(2nd of 3 in line; likely to start around" in session["PendingReason"]
    r = alice.post("retrieve_future", {"request_id": second["request_id"]})
    assert r.status_code == 408 and r.json()["queue"] == place(alice, second)
    assert r.json()["queue_state"] == "paused_capacity"
    assert r.json()["queue_state_reason"].endswith(
        f"(2nd of 3 in line; likely to start around {frees + timedelta(seconds=100):%Y-%m-%d %H:%M:%S} UTC)"
    )
    # charlie sees nothing of it
    for path, body in (
        ("get_info", {"model_id": second["model_id"]}),
        ("retrieve_future", {"request_id": second["request_id"]}),
    ):
        assert charlie.post(path, body).status_code == 404
    assert charlie.get(f"sessions/{second['session_id']}").status_code == 404
    # the slot frees: dora's model takes it, alice's move up
    assert alice.post("unload_model", {"model_id": holder["model_id"]}).status_code == 200
    runtime.drain()
    runtime.beat()
    assert info(dora, first_of_dora["model_id"])["worker"] == "test0"
    assert info(dora, first_of_dora["model_id"])["queue"] is None
    assert place(alice, second)["position"] == 1 and place(alice, third)["position"] == 2


def test_no_estimate_before_any_model_ended(alice, runtime) -> None:
    Worker.objects.update(capacity=1)
    queued(alice)
    runtime.drain()
    q = info(alice, queued(alice)["model_id"])["queue"]
    assert q["estimated_start_at"] is None
    assert q["estimate_basis"] == f"no estimate yet: no model of {TINY} has ended here"


# -- leaving the queue -----------------------------------------------------------------------
def test_a_cancelled_create_leaves_the_queue(alice, runtime, clock) -> None:
    Worker.objects.update(capacity=1)
    queued(alice)
    runtime.drain()
    futs = []
    for _ in range(3):
        futs.append(queued(alice))
        clock.advance(1)
    stopped, expired, last = futs
    assert info(alice, last["model_id"])["queue"]["position"] == 3
    # stopped by its client: it leaves, its future fails, the ones behind move up
    assert alice.post(f"sessions/{stopped['session_id']}/stop").json()["state"] == "stopped"
    failed = alice.post("retrieve_future", {"request_id": stopped["request_id"]}).json()
    assert failed["category"] == "user" and "ended while waiting for a free slot" in failed["error"]
    assert info(alice, stopped["model_id"])["placement"] == "never_placed"
    assert info(alice, stopped["model_id"])["queue"] is None
    assert info(alice, last["model_id"])["queue"]["position"] == 2
    # its client gone past the heartbeat window: its session expires and it leaves too
    Session.objects.filter(pk=expired["session_id"]).update(
        last_heartbeat_at=clock.now - timedelta(hours=1)
    )
    assert sessions_expire_idle() == [expired["session_id"]]
    assert info(alice, expired["model_id"])["queue"] is None
    assert info(alice, last["model_id"])["queue"]["position"] == 1


def test_a_queued_sampler_leaves_with_its_session(alice, charlie, runtime) -> None:
    from controlplane.tenants.services import subnet_register

    subnet_register(tenant=alice.tenant, subnet_id=SUBNET)
    r = alice.post(
        "create_session",
        {
            "tags": [],
            "sdk_version": "t",
            "role_arn": alice.role_arn,
            "vpc_config": {"subnets": [SUBNET], "security_group_ids": [SG]},
        },
    )
    sid = r.json()["session_id"]
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    sampler_id = r.json()["sampling_session_id"]
    assert r.json()["queue"]["waits_for"] == "network"
    sample = alice.post(
        "asample",
        {
            "sampling_session_id": sampler_id,
            "num_samples": 1,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
            "sampling_params": {"max_tokens": 2},
        },
    ).json()
    held = alice.post("retrieve_future", {"request_id": sample["request_id"]})
    assert held.status_code == 408 and held.json()["queue"]["kind"] == "sampler"
    session = alice.get(f"sessions/{sid}").json()
    assert [s["sampler_id"] for s in session["queued_samplers"]] == [sampler_id]
    assert session["queue"] == held.json()["queue"]
    assert charlie.post("retrieve_future", {"request_id": sample["request_id"]}).status_code == 404
    assert alice.post(f"sessions/{sid}/stop").status_code == 200
    failed = alice.post("retrieve_future", {"request_id": sample["request_id"]}).json()
    assert failed["category"] == "user" and "waited for a worker" in failed["error"]
    assert alice.get(f"samplers/{sampler_id}").json()["queue"] is None
    assert alice.get(f"sessions/{sid}").json()["queued_samplers"] == []
    assert Operation.objects.get(pk=sample["request_id"]).worker is None  # it never ran


# -- workers arriving and leaving ----------------------------------------------------------------
@pytest.fixture
def add_worker(db, tiny_host_factory):
    def start(name: str, capacity: int = 1) -> WorkerRuntime:
        settings_ = WorkerSettings(
            name=name,
            base_model=TINY,
            capacity=capacity,
            snapshot_every_steps=0,
            snapshot_every_seconds=0,
        )
        return WorkerRuntime(settings_, host=tiny_host_factory(), heartbeat=False)

    return start


def test_workers_arriving_and_leaving_place_in_the_queues_order(
    alice, dora, runtime, add_worker, clock
) -> None:
    Worker.objects.update(capacity=1)
    w1 = add_worker("w1")
    for _ in range(2):  # alice holds the slot of both workers
        queued(alice)
        clock.advance(1)
    for r in (runtime, w1):
        r.drain()
    on_w1 = TrainingModel.objects.get(worker__name="w1")
    late_alice = queued(alice)
    clock.advance(1)
    dora_first = queued(dora)
    clock.advance(1)
    # w1 leaves: its model goes back to the queue at its old place (alice's oldest), and the
    # queue's order is: dora (no slot), then alice's two
    Worker.objects.filter(name="w1").update(lease_expires_at=datetime(2000, 1, 1, tzinfo=UTC))
    assert failover.workers_declare_dead(by="test") == ["w1"]
    order = [
        (m, info(p, m)["queue"]["position"])
        for m, p in (
            (dora_first["model_id"], dora),
            (on_w1.pk, alice),
            (late_alice["model_id"], alice),
        )
    ]
    assert order == [(dora_first["model_id"], 1), (on_w1.pk, 2), (late_alice["model_id"], 3)]
    # a worker arrives: dora's model takes its slot, not the older ones of alice
    w2 = add_worker("w2")
    assert info(dora, dora_first["model_id"])["worker"] == "w2"
    # another: alice's displaced model before her later one
    add_worker("w3")
    assert info(alice, on_w1.pk)["worker"] == "w3"
    assert info(alice, late_alice["model_id"])["queue"]["position"] == 1
    w2.drain()


def test_quotas_still_refuse_what_an_account_may_hold(alice, runtime, settings) -> None:
    """The queue is for capacity: a session over the account's quota is refused at once."""
    settings.MAX_CONCURRENT_SESSIONS = 2
    Worker.objects.update(capacity=1)
    queued(alice)
    queued(alice)  # waits for a slot, and counts against the quota while it waits
    r = alice.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn})
    assert r.status_code == 429 and r.json()["code"] == "quota_exceeded", r.content
    assert "concurrent sessions" in r.json()["detail"]
