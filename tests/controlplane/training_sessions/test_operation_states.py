"""An operation's state machine and the one rule of where it belongs, and placement that prefers
workers heard from lately, on the database: workers registered with no process behind them
(``tests/fleet.py``), their leases and silences set by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.fleet.services import (
    FRESH_SILENCE,
    PLACEABLE_SILENCE,
    Fence,
    worker_register,
    worker_renew,
)
from controlplane.operations import claim
from controlplane.training_sessions import operation_states as states
from controlplane.training_sessions.models import Operation, SamplingSession, TrainingModel
from controlplane.training_sessions.services import failover, placement
from tests.fleet import registration
from tests.support.tiny_worker import TINY
from tests.support.wire import open_session

pytestmark = pytest.mark.django_db


def registered(name: str) -> Fence:
    """Worker ``name`` registered live; its fence."""
    reg = worker_register(**registration(name, TINY))
    return Fence(reg.worker.pk, reg.generation)


def silent_for(name: str, fraction: float) -> None:
    """The worker last renewed its lease ``fraction`` of the lease ago (it is still live)."""
    lease = settings.WORKER_LEASE_SECONDS
    Worker.objects.filter(name=name).update(
        lease_expires_at=timezone.now() + timedelta(seconds=(1 - fraction) * lease)
    )


def lost(name: str) -> None:
    Worker.objects.filter(name=name).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def new_model(person) -> TrainingModel:
    r = person.post(
        "create_model",
        {
            "session_id": open_session(person),
            "model_seq_id": 0,
            "base_model": TINY,
            "lora_config": {"rank": 4, "seed": 0},
        },
    )
    assert r.status_code == 200, r.content
    return TrainingModel.objects.select_related("worker").get(pk=r.json()["model_id"])


def sample(sampler: SamplingSession, worker_id: int) -> Operation:
    return Operation.objects.create(
        tenant=sampler.tenant,
        session=sampler.session,
        sampling_session=sampler,
        worker_id=worker_id,
        kind=Operation.Kind.SAMPLE,
        payload={},
        payload_digest="",
    )


def worker_of(row) -> str | None:
    row.refresh_from_db()
    return row.worker.name if row.worker_id else None


def test_the_transitions_are_the_only_ones_and_a_finished_operation_stays_finished(alice) -> None:
    assert states.allowed("pending", "running") and states.allowed("running", "done")
    assert states.allowed("running", "pending") and states.allowed("pending", "failed")
    for source in ("done", "failed"):
        for target in ("pending", "running", "done", "failed"):
            assert not states.allowed(source, target)
    assert not states.allowed("pending", "done")  # a result comes only from a claimed run

    fence = registered("a")
    model = new_model(alice)
    op = model.operations.get()  # its create_model, pending on a
    assert not states.complete(op, {}, timezone.now(), fence)  # not claimed: no result
    assert states.claim(op, fence) and op.status == "running"
    assert not states.claim(op, fence)  # once
    assert states.complete(op, {"model_id": model.pk}, timezone.now(), fence)
    done = Operation.objects.filter(pk=op.pk)
    assert states.fail(done, "late", "server") == 0
    assert states.release(done) == 0 and not states.requeue(op.pk, fence)
    op.refresh_from_db()
    assert (op.status, op.result, op.error) == ("done", {"model_id": model.pk}, "")


def test_a_sample_of_a_live_model_goes_where_the_model_is_whatever_its_sampler_row_says(
    alice,
) -> None:
    """The home rule was written twice: requeue sent a live model's sample to the model's worker,
    the sweep of requests queued on a lost worker to the sampler row's worker. A sampler created
    as its model moved keeps the lost worker on its row, and the sweep left its requests there
    for good. Written once now: both send it where the model's weights are."""
    registered("a")
    model = new_model(alice)
    assert model.worker.name == "a"
    b = registered("b")
    lost("a")
    assert failover.workers_declare_dead(by="test") == ["a"]
    assert worker_of(model) == "b"
    # created from a read of the model just before the move: its row still says a
    a = Worker.objects.get(name="a")
    sampler = SamplingSession.objects.create(
        tenant=model.tenant, session=model.session, base_model=TINY, live_model=model, worker=a
    )
    stray = sample(sampler, a.pk)  # queued on a after a was declared dead
    assert states.home_worker_id(stray) == b.worker_id
    assert placement.sampler_home(sampler).name == "b"

    failover.workers_declare_dead(by="test")  # its sweep of stray requests
    assert (worker_of(stray), worker_of(sampler)) == ("b", "b")

    # a sample of it claimed on another worker and handed back goes to b too
    c = registered("c")
    elsewhere = sample(sampler, c.worker_id)
    assert claim.claim(elsewhere, c)
    assert claim.requeue(request_id=elsewhere.pk, fence=c, home=True)
    elsewhere.refresh_from_db()
    assert (elsewhere.status, elsewhere.worker_id) == ("pending", b.worker_id)

    # a sampler of saved weights stays with its own worker
    own = SamplingSession.objects.create(
        tenant=model.tenant, session=model.session, base_model=TINY, worker_id=c.worker_id
    )
    assert states.home_worker_id(sample(own, b.worker_id)) == c.worker_id


def test_placement_never_chooses_a_worker_silent_past_its_limit_and_prefers_fresh_ones(
    alice,
) -> None:
    """A worker killed a moment ago is still live until its lease runs out: placement chose it
    when it had the most room, and the model waited a second lease there. A worker silent for
    more than ``PLACEABLE_SILENCE`` of its lease is never chosen; a fresh one comes first."""
    assert 0 < FRESH_SILENCE < PLACEABLE_SILENCE < 1
    for name in ("a", "b", "c"):
        registered(name)
    first = new_model(alice)
    assert first.worker.name == "a"  # the most room, then the name

    silent_for("b", PLACEABLE_SILENCE + 0.1)  # killed, its lease not yet run out
    assert new_model(alice).worker.name == "c"  # not b, though b has the most room
    silent_for("a", PLACEABLE_SILENCE + 0.1)  # a is going too
    r = alice.post(  # a new sampler of the base model goes to a worker heard from too
        "create_sampling_session",
        {"session_id": open_session(alice), "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert r.status_code == 200, r.content
    assert worker_of(SamplingSession.objects.get(pk=r.json()["sampling_session_id"])) == "c"

    # a is lost: its model moves to c, not to the silent b with the most room
    lost("a")
    assert failover.workers_declare_dead(by="test") == ["a"]
    assert worker_of(first) == "c"

    # merely live (quiet past a beat and a half) against fresh: the fresh one first
    registered("d")
    registered("e")
    silent_for("d", FRESH_SILENCE + 0.1)
    assert new_model(alice).worker.name == "e"
    assert new_model(alice).worker.name == "e"  # fresh first, even with less room
    Worker.objects.filter(name__in=("c", "e")).update(capacity=2)  # both full now
    assert new_model(alice).worker.name == "d"  # merely live, but placeable

    # with only silent workers left a model waits, saying why, until one beats again
    for name in ("c", "d", "e"):
        lost(name)
    failover.workers_declare_dead(by="test")
    waiting = TrainingModel.objects.get(pk=first.pk)
    assert (waiting.worker_id, waiting.placement) == (None, "waiting_for_worker")
    assert "1 live one has not renewed its lease for over 50% of it" in waiting.status_reason
    r = alice.post(  # a new sampler waits too, and says why
        "create_sampling_session",
        {"session_id": open_session(alice), "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert r.status_code == 200, r.content
    assert r.json()["queue"]["waits_for"] == "worker"
    assert "1 live one has not renewed its lease" in r.json()["queue"]["reason"]
    b = Worker.objects.get(name="b")
    assert worker_renew(worker_id=b.pk, generation=b.generation)
    assert first.pk in placement.models_place_waiting(base_model=TINY)
    assert worker_of(first) == "b"
