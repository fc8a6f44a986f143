"""Failover inside one process: two in-process workers, one declared dead (its lease run out),
the other restoring its model from the recovery point and replaying what completed since.
The chaos tests with real processes and kill -9 are in tests/e2e/test_failover_e2e.py."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch
from django.db import connection, connections
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.fleet.models import Worker
from controlplane.metering.models import UsageRecord
from controlplane.operations import claim, complete
from controlplane.training_sessions.models import (
    Operation,
    RecordedSample,
    Recovery,
    SamplingSession,
    TrainingModel,
)
from controlplane.training_sessions.services import failover
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result
from workers.runtime import WorkerRuntime, WorkerSettings

pytestmark = pytest.mark.django_db(transaction=True)
ADAM = {"learning_rate": 0.05}


@pytest.fixture(autouse=True)
def _postgres():
    # Two workers and a background snapshot writer write at once; SQLite's in-memory test
    # database refuses a second writer at once instead of waiting (the embedded default's
    # file waits). The embedded stack's failover is tested end to end.
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers: run with DATABASE_URL=postgres://…")


@pytest.fixture
def start(tiny_host_factory):
    """Start an in-process worker (no heartbeat thread: the tests beat it)."""
    started: list[WorkerRuntime] = []

    def make(name: str, *, every_steps: int = 0) -> WorkerRuntime:
        settings = WorkerSettings(
            name=name,
            base_model=TINY,
            capacity=4,
            snapshot_every_steps=every_steps,
            snapshot_every_seconds=0,
        )
        runtime = WorkerRuntime(settings, host=tiny_host_factory(), heartbeat=False)
        started.append(runtime)
        return runtime

    yield make
    for runtime in started:
        runtime.snapshots.flush(10)


def lease_runs_out(runtime: WorkerRuntime) -> None:
    Worker.objects.filter(pk=runtime.worker.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def trained_on(alice, runtime: WorkerRuntime) -> str:
    """A new model on ``runtime`` with two steps done: its id."""
    model_id = create_model(alice, runtime, open_session(alice))
    for fut in steps(alice, model_id, 1, 2):
        result(alice, runtime, fut)
    return model_id


def lost(runtime: WorkerRuntime, model_id: str) -> str:
    """``runtime``'s lease runs out and the sweep declares it dead: the worker ``model_id`` is
    on afterwards."""
    lease_runs_out(runtime)
    failover.workers_declare_dead(by="test")
    return TrainingModel.objects.get(pk=model_id).worker.name


def steps(alice, model_id: str, first_seq: int, n: int) -> list[dict]:
    """``n`` forward_backward + optim_step pairs from ``first_seq`` (futures, not awaited)."""
    futures = []
    for i in range(n):
        seq = first_seq + 2 * i
        tokens = [(seq * 11 + j * 7) % 250 for j in range(9)]
        futures.append(alice.post("forward_backward", fwdbwd(model_id, seq, [datum(tokens)])))
        futures.append(
            alice.post("optim_step", {"model_id": model_id, "seq_id": seq + 1, "adam_params": ADAM})
        )
    return [f.json() for f in futures]


def adapter(runtime: WorkerRuntime, model_id: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in runtime.host.pool.state_dict(model_id).items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def reference(alice, runtime: WorkerRuntime, n: int) -> dict[str, torch.Tensor]:
    """The adapter after ``n`` steps with nothing going wrong (the same seed, data, order)."""
    model_id = create_model(alice, runtime, open_session(alice))
    for fut in steps(alice, model_id, 1, n):
        assert "metrics" in result(alice, runtime, fut)
    return adapter(runtime, model_id)


def test_a_silent_worker_is_declared_dead_once_and_its_model_ends_as_if_nothing_happened(
    alice, start
) -> None:
    a = start("a")
    model_id = create_model(alice, a, open_session(alice))
    done = steps(alice, model_id, 1, 3)
    for fut in done:
        assert "metrics" in result(alice, a, fut)
    running = alice.post("forward_backward", fwdbwd(model_id, 7, [datum([5, 6, 7, 8])])).json()
    [in_flight], _ = claim.claim_runnable(fence=a.fence, sample_limit=8)
    assert in_flight.pk == running["request_id"]
    b = start("b")
    lease_runs_out(a)

    declared: list[list[str]] = []

    def declare(by: str) -> None:
        declared.append(failover.workers_declare_dead(by=by))
        connections.close_all()

    threads = [threading.Thread(target=declare, args=(f"t{i}",)) for i in range(4)]
    for t in threads:  # at once, from four connections
        t.start()
    for t in threads:
        t.join()
    declare("after")
    assert sorted(map(len, declared)) == [0, 0, 0, 0, 1]  # exactly once
    dead = Worker.objects.get(pk=a.worker.pk)
    assert (dead.state, dead.generation) == ("dead", a.fence.generation + 1)
    model = TrainingModel.objects.get(pk=model_id)
    assert (model.worker.name, model.placement) == ("b", "placed")
    op = Operation.objects.get(pk=running["request_id"])
    assert (op.status, op.worker.name) == ("pending", "b")  # back to pending, on b
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.cause, recovery.from_worker, recovery.requeued) == ("worker_lost", "a", 1)
    assert AuditEvent.objects.filter(action="sessions:MoveModel").count() == 1

    # b restores it from its start (no recovery point: its create_model, same seed) and
    # replays the six completed steps; the step in flight runs once, on b
    rest = steps(alice, model_id, 8, 2)
    for fut in [running, *rest]:
        assert "metrics" in result(alice, b, fut)
    recovery.refresh_from_db()
    assert (recovery.outcome, recovery.to_worker, recovery.replayed) == ("restored", "b", 7)
    assert recovery.recovery_kind == "start" and recovery.seconds >= 0

    # the same operations on one worker that never stopped: the same adapter, bit for bit
    c = start("c")
    ref_model = create_model(alice, c, open_session(alice))
    for fut in steps(alice, ref_model, 1, 3):
        result(alice, c, fut)
    result(
        alice, c, alice.post("forward_backward", fwdbwd(ref_model, 7, [datum([5, 6, 7, 8])])).json()
    )
    for fut in steps(alice, ref_model, 8, 2):
        result(alice, c, fut)
    assert same(adapter(b, model_id), adapter(c, ref_model))

    # billed once per operation, replays nothing
    for fut in [*done, running, *rest]:
        assert UsageRecord.objects.filter(operation_id=fut["request_id"]).count() == (
            1 if Operation.objects.get(pk=fut["request_id"]).kind == "forward_backward" else 0
        )


def test_a_moved_model_is_restored_at_once_not_when_its_user_comes_back(alice, start) -> None:
    """The loop may be busy elsewhere (scoring, data loading): the new worker restores the
    model as soon as its heartbeat finds it, so the next step does not wait for that."""
    a = start("a")
    model_id = create_model(alice, a, open_session(alice))
    for fut in steps(alice, model_id, 1, 2):
        result(alice, a, fut)
    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    b.beat()
    b.drain()  # nothing to run: it restores what moved here meanwhile
    assert b.host.has_adapter(model_id)
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.outcome, recovery.replayed) == ("restored", 5)


def test_a_model_moved_twice_before_it_was_restored_ends_both_moves(alice, start) -> None:
    """Its worker is lost, then the one it moved to before restoring it: one restore, on the
    third worker, ends both recoveries (none is left "restoring"), each naming its own move."""
    a = start("a")
    model_id = trained_on(alice, a)
    b = start("b")
    assert lost(a, model_id) == "b"
    c = start("c")
    assert lost(b, model_id) == "c"
    c.beat()
    c.drain()
    moves = list(Recovery.objects.filter(model_id=model_id).order_by("id"))
    assert [(r.from_worker, r.outcome, r.to_worker) for r in moves] == [
        ("a", "restored", "b"),
        ("b", "restored", "c"),
    ]
    assert moves[0].restored_at == moves[1].restored_at and moves[1].replayed == 5


def test_a_model_moved_back_to_its_restarted_worker_names_each_move_truthfully(
    alice, start
) -> None:
    """a is lost and its model moves to b; a starts again, then b is lost before restoring it:
    the model goes back to a. The record shows a → b, then b → a (never a move from a to a)."""
    a = start("a")
    model_id = trained_on(alice, a)
    b = start("b")
    assert lost(a, model_id) == "b"
    again = start("a")  # a new process under the old name
    assert lost(b, model_id) == "a"
    again.beat()
    again.drain()
    assert again.host.has_adapter(model_id)
    moves = list(Recovery.objects.filter(model_id=model_id).order_by("id"))
    assert [(r.from_worker, r.outcome, r.to_worker) for r in moves] == [
        ("a", "restored", "b"),
        ("b", "restored", "a"),
    ]


def test_a_worker_declared_dead_can_change_nothing_and_starts_empty(alice, start) -> None:
    a = start("a")
    b = start("b")
    model_id = create_model(alice, a, open_session(alice))
    fut = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])])).json()
    [op], _ = claim.claim_runnable(fence=a.fence, sample_limit=8)
    old = a.fence
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    with pytest.raises(complete.Fenced):  # its completion under the old generation
        complete.complete(op, {"metrics": {}, "loss_fn_outputs": []}, old)
    assert claim.claim_runnable(fence=old, sample_limit=8) == ([], [])  # nor can it claim
    assert Operation.objects.get(pk=op.pk).status == "pending"

    a.beat()  # its heartbeat finds the lease gone: it drops everything, registers anew
    assert a.fence.generation == old.generation + 2 and not a.host.pool.ids()
    assert Worker.objects.get(pk=a.worker.pk).state == "active"
    assert "metrics" in result(alice, b, fut)  # the step runs, once, where the model is now


def test_snapshots_keep_the_replay_short(alice, start) -> None:
    a = start("a", every_steps=2)
    model_id = create_model(alice, a, open_session(alice))
    for fut in steps(alice, model_id, 1, 5):  # seq 1..10: snapshots after optim_step 4 and 8
        result(alice, a, fut)
    a.snapshots.flush(30)
    point = TrainingModel.objects.get(pk=model_id).recovery
    assert (point["kind"], point["seq"]) == ("snapshot", 8)
    assert point["sealing"]["key_arn"].startswith("arn:loopwright:kms:")
    extra = alice.post("forward_backward", fwdbwd(model_id, 11, [datum([9, 8, 7])])).json()
    result(alice, a, extra)  # gradients pending when the worker is lost

    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    last = alice.post("optim_step", {"model_id": model_id, "seq_id": 12, "adam_params": ADAM})
    assert "metrics" in result(alice, b, last.json())
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.recovery_kind, recovery.recovery_seq, recovery.replayed) == ("snapshot", 8, 3)

    c = start("c")
    ref = create_model(alice, c, open_session(alice))
    for fut in steps(alice, ref, 1, 5):
        result(alice, c, fut)
    result(alice, c, alice.post("forward_backward", fwdbwd(ref, 11, [datum([9, 8, 7])])).json())
    result(
        alice,
        c,
        alice.post("optim_step", {"model_id": ref, "seq_id": 12, "adam_params": ADAM}).json(),
    )
    assert same(adapter(b, model_id), adapter(c, ref))


def test_a_clean_state_save_is_a_recovery_point_and_supersedes_the_snapshot(alice, start) -> None:
    a = start("a", every_steps=1)
    model_id = create_model(alice, a, open_session(alice))
    for fut in steps(alice, model_id, 1, 1):
        result(alice, a, fut)
    a.snapshots.flush(30)
    snapshot = TrainingModel.objects.get(pk=model_id).recovery
    assert snapshot["kind"] == "snapshot"
    from controlplane.training_sessions.services.storage import storage_at

    assert storage_at(snapshot["storage_uri"]).list()  # stored
    fb = alice.post("forward_backward", fwdbwd(model_id, 3, [datum([1, 2])])).json()
    result(alice, a, fb)
    pending = alice.post("save_weights", {"model_id": model_id, "seq_id": 4, "path": "mid"})
    result(alice, a, pending.json())  # taken with gradients pending: not a recovery point
    assert TrainingModel.objects.get(pk=model_id).recovery["kind"] == "snapshot"
    step = alice.post("optim_step", {"model_id": model_id, "seq_id": 5, "adam_params": ADAM})
    result(alice, a, step.json())
    a.snapshots.flush(30)
    clean = alice.post("save_weights", {"model_id": model_id, "seq_id": 6, "path": "clean"})
    result(alice, a, clean.json())
    point = TrainingModel.objects.get(pk=model_id).recovery
    assert (point["kind"], point["seq"], point["tinker_path"]) == (
        "save",
        6,
        f"tinker://{model_id}/weights/clean",
    )
    assert not storage_at(snapshot["storage_uri"]).list()  # the superseded snapshot is gone


def test_a_stopping_worker_snapshots_and_hands_over(alice, start) -> None:
    a = start("a", every_steps=100)
    b = start("b")
    session = open_session(alice)
    model_id = create_model(alice, a, session)
    for fut in steps(alice, model_id, 1, 2):
        result(alice, a, fut)
    a.shutdown()
    model = TrainingModel.objects.get(pk=model_id)
    assert model.worker.name == "b" and model.recovery["seq"] == 4
    assert Worker.objects.get(pk=a.worker.pk).state == "gone"
    fut = alice.post("forward_backward", fwdbwd(model_id, 5, [datum([4, 4, 4])])).json()
    assert "metrics" in result(alice, b, fut)
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.cause, recovery.recovery_kind, recovery.replayed) == (
        "worker_stopped",
        "snapshot",
        0,
    )
    assert a.drain() == 0  # stopped: it takes nothing more


def test_a_replay_that_diverges_fails_the_model_naming_where_to_resume(alice, start) -> None:
    a = start("a")
    model_id = create_model(alice, a, open_session(alice))
    for fut in steps(alice, model_id, 1, 1):
        result(alice, a, fut)
    saved = alice.post("save_weights", {"model_id": model_id, "seq_id": 3, "path": "s1"}).json()
    result(alice, a, saved)
    Operation.objects.filter(pk=saved["request_id"]).update(kind="forward")  # not a point
    TrainingModel.objects.filter(pk=model_id).update(recovery=None)
    recorded = Operation.objects.get(model_id=model_id, seq_id=1)
    recorded.result["metrics"]["loss:sum"] += 1.0  # what it gave "then" differs from now
    recorded.save(update_fields=["result"])
    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    fut = alice.post("forward_backward", fwdbwd(model_id, 4, [datum([3, 3])])).json()
    body = result(alice, b, fut)
    assert body["category"] == "server" and body["code"] == "model_lost"
    assert body["resume_from"] == f"tinker://{model_id}/weights/s1"
    assert "replaying seq_id 1 (forward_backward)" in body["error"]
    assert f"resume from tinker://{model_id}/weights/s1" in body["error"]
    assert TrainingModel.objects.get(pk=model_id).state == "failed"
    assert Recovery.objects.get(model_id=model_id).outcome == "failed"


def test_samplers_move_and_a_seeded_sample_draws_the_same_tokens(alice, start) -> None:
    a = start("a")
    session = open_session(alice)
    model_id = create_model(alice, a, session)
    for fut in steps(alice, model_id, 1, 1):
        result(alice, a, fut)
    saved = alice.post(
        "save_weights_for_sampler", {"model_id": model_id, "seq_id": 3, "path": "w"}
    ).json()
    path = result(alice, a, saved)["path"]
    samplers = {
        "saved": {"model_path": path},
        "live": {"model_id": model_id},
        "base": {"base_model": TINY},
    }
    ids = {}
    for i, (name, source) in enumerate(samplers.items()):
        r = alice.post(
            "create_sampling_session",
            {"session_id": session, "sampling_session_seq_id": i, **source},
        )
        ids[name] = r.json()["sampling_session_id"]

    def sample(sampler_id: str, seq: int) -> dict:
        prompt = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]}
        body = {
            "sampling_session_id": sampler_id,
            "seq_id": seq,
            "num_samples": 2,
            "prompt": prompt,
            "sampling_params": {"max_tokens": 6, "seed": 17, "stop": []},
        }
        return alice.post("asample", body).json()

    before = {name: result(alice, a, sample(sid, 1)) for name, sid in ids.items()}
    in_flight = {name: sample(sid, 2) for name, sid in ids.items()}  # a dies before they run
    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    assert set(SamplingSession.objects.values_list("worker__name", flat=True)) == {"b"}

    def drawn(answer: dict) -> list[dict]:  # each request's sequences have ids of their own
        skip = {"sequence_id", "logprobs"}
        return [{k: v for k, v in s.items() if k not in skip} for s in answer["sequences"]]

    def logprobs(answer: dict) -> list[float]:
        return [p for s in answer["sequences"] for p in s["logprobs"]]

    for name, fut in in_flight.items():
        after = result(alice, b, fut)
        assert drawn(after) == drawn(before[name]), name
        # the three samplers now share one engine call: the same tokens, logprobs to float32
        assert logprobs(after) == pytest.approx(logprobs(before[name]), abs=1e-5), name


def test_the_session_shows_its_failovers_and_charlie_sees_none(alice, charlie, start) -> None:
    a = start("a")
    session = open_session(alice)
    model_id = create_model(alice, a, session)
    result(alice, a, alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1])])).json())
    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="janitor")
    fut = alice.post("optim_step", {"model_id": model_id, "seq_id": 2, "adam_params": ADAM})
    result(alice, b, fut.json())
    body = alice.get(f"sessions/{session}").json()
    (shown,) = body["recoveries"]
    assert shown["model_id"] == model_id and shown["cause"] == "worker_lost"
    assert (shown["from_worker"], shown["to_worker"], shown["declared_by"]) == ("a", "b", "janitor")
    assert shown["recovery_point"] is None and shown["operations_replayed"] == 2
    assert shown["outcome"] == "restored" and shown["seconds_to_recover"] >= 0
    assert charlie.get(f"sessions/{session}").status_code == 404


def test_a_snapshot_goes_when_its_session_ends(alice, start) -> None:
    from controlplane.training_sessions.services.storage import storage_at

    a = start("a", every_steps=1)
    session = open_session(alice)
    model_id = create_model(alice, a, session)
    for fut in steps(alice, model_id, 1, 1):
        result(alice, a, fut)
    a.snapshots.flush(30)
    point = TrainingModel.objects.get(pk=model_id).recovery
    assert point["kind"] == "snapshot" and storage_at(point["storage_uri"]).list()
    assert alice.post(f"sessions/{session}/stop").status_code == 200
    a.drain()  # the unload runs after what was queued
    assert TrainingModel.objects.get(pk=model_id).recovery is None
    assert not storage_at(point["storage_uri"]).list()


def test_a_model_with_a_settled_gap_fails_over_and_replays_exactly(alice, start) -> None:
    """seq_ids 3 to 6 never arrive and are settled as one range; a request refused on arrival
    takes seq_id 8; the model then moves and replays exactly what ran, skipping both."""
    from controlplane.operations import ordering

    a = start("a")
    model_id = create_model(alice, a, open_session(alice))
    for fut in steps(alice, model_id, 1, 1):  # seq 1, 2
        result(alice, a, fut)
    after_gap = steps(alice, model_id, 7, 1)  # seq 7 (forward_backward), 8 (optim_step)
    refused = alice.post("save_weights", {"model_id": model_id, "seq_id": 9, "path": "bad!"})
    assert refused.status_code == 400
    tail = steps(alice, model_id, 10, 1)  # seq 10, 11
    assert ordering.settle_gaps(worker=a.worker, gap_seconds=0) == 1
    for fut in [*after_gap, *tail]:
        assert "metrics" in result(alice, a, fut)
    missing = Operation.objects.get(model_id=model_id, kind="missing")
    assert ordering.missing_range(missing) == (3, 6)

    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    last = steps(alice, model_id, 12, 1)
    for fut in last:
        assert "metrics" in result(alice, b, fut)
    recovery = Recovery.objects.get(model_id=model_id)
    # create_model and the three pairs that ran; the range and the refusal are skipped
    assert (recovery.outcome, recovery.replayed) == ("restored", 7)

    # the same steps, without the gap, on a worker that never stopped: the same adapter
    c = start("c")
    ref = create_model(alice, c, open_session(alice))
    for seq, data_of in enumerate((1, 7, 10, 12)):
        tokens = [(data_of * 11 + j * 7) % 250 for j in range(9)]
        fb = alice.post("forward_backward", fwdbwd(ref, 2 * seq + 1, [datum(tokens)])).json()
        step = {"model_id": ref, "seq_id": 2 * seq + 2, "adam_params": ADAM}
        result(alice, c, fb)
        result(alice, c, alice.post("optim_step", step).json())
    assert same(adapter(b, model_id), adapter(c, ref))


def test_stable_reinforce_on_recorded_sequences_replays_exactly_without_the_store(
    alice, start
) -> None:
    """Recorded samples (one of them sampled on the worker that dies, still in flight) are
    cited by stable_reinforce steps; the worker is lost and, before anything runs again, every
    recording is gone: the model replays from its start on another worker with the recorded
    logprobs its operations keep, and ends bit for bit where a worker that never stopped ends
    with the same requests."""
    from controlplane.operations import training
    from tests.controlplane.training_sessions.test_recorded_sampling import datum_of

    a = start("a")
    session = open_session(alice)
    model_id = create_model(alice, a, session)
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "model_id": model_id},
    ).json()["sampling_session_id"]

    def sample(seq: int) -> dict:
        body = {
            "sampling_session_id": sampler,
            "seq_id": seq,
            "num_samples": 2,
            "prompt": {"chunks": [{"tokens": [5, 6, 7, 8, 9]}]},
            "sampling_params": {"max_tokens": 4, "seed": seq, "stop": []},
            "record_stability_info": True,
        }
        return alice.post("asample", body).json()

    def step(seq: int, sampled: dict) -> list[dict]:
        seqs = sampled["sequences"]
        data = [datum_of(seqs[0], advantage=1.0), datum_of(seqs[1], advantage=-1.0)]
        batch = {"data": data, "loss_fn": "stable_reinforce"}
        fb = alice.post(
            "forward_backward",
            {"model_id": model_id, "seq_id": seq, "forward_backward_input": batch},
        )
        assert fb.status_code == 200, fb.content
        optim = alice.post(
            "optim_step", {"model_id": model_id, "seq_id": seq + 1, "adam_params": ADAM}
        )
        return [fb.json(), optim.json()]

    for fut in step(1, result(alice, a, sample(0))):
        assert "error" not in result(alice, a, fut)
    in_flight = sample(1)  # recorded on a worker, then the worker is lost before it finishes
    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    later = step(3, result(alice, b, in_flight))
    RecordedSample.objects.all().delete()  # the store is no part of a replay
    for fut in later:
        assert "metrics" in result(alice, b, fut)
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.outcome, recovery.to_worker) == ("restored", "b")

    # a worker that never stopped, given the same requests as the service stored them
    c = start("c")
    twin = create_model(alice, c, open_session(alice))
    for op in Operation.objects.filter(model_id=model_id, seq_id__gte=1).order_by("seq_id"):
        assert op.kind != "forward_backward" or "recorded" in op.payload
        done = training.training_submit(
            tenant=alice.tenant, model_id=twin, seq_id=op.seq_id, kind=op.kind, payload=op.payload
        )
        assert "error" not in result(alice, c, {"request_id": done.pk})
    assert same(adapter(b, model_id), adapter(c, twin))


def test_a_dimuon_model_trained_with_stable_reinforce_replays_exactly(alice, start) -> None:
    """Dimuon's momentum and stable_reinforce's masked ratios, replayed on another worker from
    the model's start: the adapter ends bit for bit as on a worker that never stopped. (The
    stable_reinforce requests are submitted as the service stores them, with their recorded
    logprobs and sampled_mask filled in.)"""
    from controlplane.operations import training
    from tests.controlplane.test_dimuon_api import DIMUON, create, step

    def rl_datum(seq: int) -> dict:
        tokens = [(seq * 11 + j * 7) % 250 for j in range(9)]
        d = datum(tokens)
        d["loss_fn_inputs"] = {
            "target_tokens": d["loss_fn_inputs"]["target_tokens"],
            # log-ratios both inside and outside the band, a prompt of three tokens
            "logprobs": {
                "data": [0.0] * 3 + [-5.5, -4.0, -7.5, -5.0, -6.5, -3.0],
                "dtype": "float32",
            },
            "advantages": {
                "data": [0.0] * 3 + [1.0, -0.5, 1.0, 2.0, -1.0, 0.5],
                "dtype": "float32",
            },
            "sampled_mask": {"data": [0.0] * 3 + [1.0] * 6, "dtype": "float32"},
        }
        return d

    def train(runtime, model_id: str, first: int, n: int) -> list[dict]:
        futures = []
        for i in range(n):
            seq = first + 2 * i
            op = training.training_submit(
                tenant=alice.tenant,
                model_id=model_id,
                seq_id=seq,
                kind="forward_backward",
                payload={
                    "forward_backward_input": {
                        "data": [rl_datum(seq)],
                        "loss_fn": "stable_reinforce",
                        "loss_fn_config": {"kl_coeff": 0.1},
                    }
                },
            )
            futures.append({"request_id": op.pk})
            futures.append(alice.post("optim_step", step(model_id, seq + 1, dimuon=True)).json())
        return futures

    a = start("a")
    model_id = create(alice, a, open_session(alice), 0, DIMUON)
    done = [result(alice, a, fut) for fut in train(a, model_id, 1, 3)]
    assert all("metrics" in r for r in done)
    assert done[0]["metrics"]["masked_tokens:sum"] >= 1  # ratios outside the band: masked
    b = start("b")
    lease_runs_out(a)
    failover.workers_declare_dead(by="test")
    for fut in train(b, model_id, 7, 2):
        assert "metrics" in result(alice, b, fut)
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.outcome, recovery.to_worker, recovery.replayed) == ("restored", "b", 7)
    assert b.host.pool.config(model_id).optimizer == "dimuon"

    c = start("c")
    ref = create(alice, c, open_session(alice), 0, DIMUON)
    for fut in train(c, ref, 1, 5):
        assert "metrics" in result(alice, c, fut)
    assert same(adapter(b, model_id), adapter(c, ref))
    moments = [c.host.pool.optimizer(ref), b.host.pool.optimizer(model_id)]
    assert moments[0].step == moments[1].step == 5
    assert same(moments[0].exp_avg, moments[1].exp_avg) and not moments[1].exp_avg_sq


def test_a_model_moved_here_holds_up_neither_the_models_here_nor_other_moved_ones(
    alice, charlie, start
) -> None:
    """One pass claims a forward_backward of the model this worker holds and of two models
    moved here from a lost worker: the held model's runs and is recorded before any restore
    starts, and each moved model's runs right after its own restore, before the next one's.
    Each ends as without the loss."""
    b = start("b")
    moved = [trained_on(alice, b), trained_on(alice, b)]
    a = start("a")
    here = trained_on(alice, a)  # the emptier worker
    assert TrainingModel.objects.get(pk=here).worker.name == "a"
    assert lost(b, moved[0]) == "a" and TrainingModel.objects.get(pk=moved[1]).worker.name == "a"
    futures = {m: steps(alice, m, 5, 1)[0] for m in [here, *moved]}
    a.drain()
    ops = {m: Operation.objects.get(pk=fut["request_id"]) for m, fut in futures.items()}
    assert all(op.status == Operation.Status.DONE for op in ops.values())
    restored = {
        m: Recovery.objects.get(model_id=m, outcome=Recovery.Outcome.RESTORED).restored_at
        for m in moved
    }
    assert ops[here].finished_at < min(restored.values())
    first, second = sorted(moved, key=restored.get)
    assert restored[first] <= ops[first].finished_at < restored[second]
    # as without the loss: the same two steps and one more on a worker that lost nothing
    expected = reference(alice, a, 3)
    assert all(same(adapter(a, m), expected) for m in [here, *moved])
    r = charlie.post("retrieve_future", {"request_id": futures[here]["request_id"]})
    assert r.status_code == 404
