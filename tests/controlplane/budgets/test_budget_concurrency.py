"""A hard budget under load: 16 sessions submit training and sampling requests at once, each
through the API on its own connection, while a worker completes them, until the budget refuses
each of them; what they used ends over the limit by less than one operation's cost, whatever
order the requests came in. (A sample is admitted for the most it can use, its prompt and every
token it may draw; it may use less, so the limit itself need not be reached.)"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections
from django.db.models import Sum
from django.utils import timezone

from controlplane.metering.models import UsageRecord
from controlplane.metering.reports import usage_report
from controlplane.metering.services import price_set
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd

pytestmark = pytest.mark.django_db(transaction=True)

SESSIONS = 16
PROMPT = [3, 1, 4, 1, 5]
SAMPLE_BOUND = len(PROMPT) + 2 * 6  # prompt + 2 samples × 6 tokens at most


@pytest.fixture(autouse=True)
def postgres(settings):
    if connection.vendor != "postgresql":
        pytest.skip("concurrent requests need PostgreSQL's row locks")
    settings.MAX_CONCURRENT_SESSIONS = SESSIONS


@pytest.fixture
def runtime(db, tiny_host_factory):
    """A worker with room for every session's model."""
    from workers.runtime import WorkerRuntime, WorkerSettings

    return WorkerRuntime(
        WorkerSettings(
            name="load0",
            base_model=TINY,
            capacity=SESSIONS + 1,
            snapshot_every_steps=0,
            snapshot_every_seconds=0,
        ),
        host=tiny_host_factory(),
        heartbeat=False,
    )


def _world(alice, runtime) -> list[tuple[str, str, str]]:
    """16 sessions, each with a training model and a sampler on the base model."""
    made = []
    for _ in range(SESSIONS):
        r = alice.post(
            "create_session", {"tags": ["load"], "sdk_version": "t", "role_arn": alice.role_arn}
        )
        sid = r.json()["session_id"]
        model = create_model(alice, runtime, sid)
        sampler = alice.post(
            "create_sampling_session",
            {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
        ).json()["sampling_session_id"]
        made.append((sid, model, sampler))
    return made


def _submitter(alice, model: str, sampler: str, seed: int, refusals: list) -> list[int]:
    """Send requests until the budget refuses one; the bounds of those it admitted."""
    rng = random.Random(seed)
    admitted, seq = [], 0
    try:
        while True:
            if rng.random() < 0.7:
                size = rng.randrange(4, 40)
                seq += 1
                body = fwdbwd(model, seq, [datum([rng.randrange(1, 200) for _ in range(size)])])
                r = alice.post("forward_backward", body)
            else:
                size = SAMPLE_BOUND
                sample = {
                    "sampling_session_id": sampler,
                    "num_samples": 2,
                    "prompt": {"chunks": [{"type": "encoded_text", "tokens": PROMPT}]},
                    "sampling_params": {"max_tokens": 6, "seed": seed},
                }
                r = alice.post("asample", sample)
            if r.status_code == 402:
                refusals.append(r.json()["detail"])
                return admitted
            assert r.status_code == 200, r.content
            admitted.append(size)
    finally:
        connections.close_all()


def _run(alice, runtime, world) -> tuple[list[int], list[str]]:
    stop = threading.Event()

    def complete() -> None:
        try:
            while not stop.is_set():
                runtime.drain()
        finally:
            connections.close_all()

    worker = threading.Thread(target=complete)
    worker.start()
    refusals: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
            done = pool.map(
                lambda i: _submitter(alice, world[i][1], world[i][2], i, refusals), range(SESSIONS)
            )
            admitted = [size for sizes in done for size in sizes]
    finally:
        stop.set()
        worker.join()
    runtime.drain()
    return admitted, refusals


def test_a_token_budget_is_overshot_by_less_than_one_operation(alice, runtime) -> None:
    world = _world(alice, runtime)
    limit = 1500
    r = alice.post(
        "billing/budgets",
        {"name": "load", "scope": "account", "unit": "tokens", "period": "month", "amount": limit},
    )
    assert r.status_code == 201
    admitted, refusals = _run(alice, runtime, world)
    used = UsageRecord.objects.filter(tenant=alice.tenant).aggregate(q=Sum("quantity"))["q"]
    assert len(refusals) == SESSIONS  # every session was stopped by the budget
    assert all("budget 'load'" in text for text in refusals)
    # what was admitted reached the limit; what was used is over it by less than the largest
    # operation admitted (at most one admission crosses it)
    assert limit <= sum(admitted) and used <= sum(admitted)
    assert used < limit + max(admitted), (used, sorted(admitted)[-3:])
    shown = alice.get("billing/budgets/load").json()["current_period"]
    assert (shown["spent"], shown["held"]) == (str(used), "0")  # nothing is held any more


def test_a_dollar_budget_is_overshot_by_less_than_one_operation(alice, runtime) -> None:
    since = timezone.now() - timedelta(days=1)
    for meter, price in (("train_tokens", 30), ("prefill_tokens", 10), ("sampled_tokens", 25)):
        price_set(
            base_model="*", meter=meter, per_million=Decimal(price) * 10_000, effective_from=since
        )
    world = _world(alice, runtime)
    limit = Decimal("300")  # at $0.30 a train token: about a thousand tokens
    r = alice.post(
        "billing/budgets",
        {
            "name": "cash",
            "scope": "tag",
            "scope_value": "load",
            "unit": "usd",
            "period": "day",
            "amount": str(limit),
        },
    )
    assert r.status_code == 201
    admitted, refusals = _run(alice, runtime, world)
    today = timezone.now().date()
    cost = usage_report(tenant=alice.tenant, start=today, end=today).cost
    most = Decimal(max(admitted)) * Decimal("0.30")  # no token costs more than a train token
    assert len(refusals) == SESSIONS and all("budget 'cash'" in t for t in refusals)
    assert cost < limit + most, (cost, most)
    assert cost > limit - SESSIONS * SAMPLE_BOUND * Decimal("0.25")  # at most each session's
    # last sample drew less than it might have
