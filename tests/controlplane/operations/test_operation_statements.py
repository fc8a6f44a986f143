"""The hot path in few statements: on PostgreSQL the operations table notifies by itself (the
worker on insert, waiters on completion, with the finished state in the notice), the worker
claims with one statement and completes a plain operation with one statement that also writes
its usage and day totals, which must equal what the general path and a rebuild compute."""

from __future__ import annotations

import json

import psycopg
import pytest
import torch
from django.db import OperationalError, connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from controlplane import pg_listen
from controlplane.metering.models import UsageDaily, UsageRecord
from controlplane.metering.rollup import daily_rebuild
from controlplane.operations import claim, complete, notices
from controlplane.training_sessions.models import Operation, Recovery, TrainingModel
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the triggers and one-statement paths are PostgreSQL's")


def _database_goes_away_once(monkeypatch) -> None:
    """The next completion the worker records fails as if the database had gone away."""
    real = complete.complete

    def gone(op, result, fence):
        monkeypatch.setattr(complete, "complete", real)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(complete, "complete", gone)


def _listening(*channels: str) -> psycopg.Connection:
    conn = psycopg.connect(autocommit=True, **pg_listen.connect_params())
    for channel in channels:
        conn.execute(f"LISTEN {channel}")
    return conn


def _notices(conn: psycopg.Connection, timeout: float = 2.0) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=timeout, stop_after=50)]


def test_a_submit_wakes_its_worker_and_a_completion_carries_its_state(
    postgres, alice, charlie, runtime
) -> None:
    session = open_session(alice)
    model_id = create_model(alice, runtime, session)
    with _listening("loopwright_wake", notices.CHANNEL) as conn:
        r = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3, 4])]))
        assert r.status_code == 200, r.content
        request_id = r.json()["request_id"]
        assert ("loopwright_wake", runtime.worker.queue) in _notices(conn, 1.0)
        runtime.drain()
        notes = [p for c, p in _notices(conn) if c == notices.CHANNEL]
    op = Operation.objects.get(pk=request_id)
    mine = [notices.parse_notice(p) for p in notes if json.loads(p)["id"] == request_id]
    assert mine == [
        (request_id, {"status": "done", "result": op.result, "error": "", "error_category": ""})
    ]
    # the waiter answers from the notice: the same body as reading the row
    assert result(alice, runtime, {"request_id": request_id}) == {
        k: v for k, v in op.result.items() if not k.startswith("_")
    }
    assert charlie.post("retrieve_future", {"request_id": request_id}).status_code == 404


def test_a_failure_notice_names_the_error_and_a_large_result_only_the_id(
    postgres, alice, runtime
) -> None:
    session = open_session(alice)
    model_id = create_model(alice, runtime, session)
    long = list(range(1, 255)) * 2  # ~500 tokens: a result over a notice's 8,000 bytes
    with _listening(notices.CHANNEL) as conn:
        bad = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2], targets=[1])]))
        forward_input = {"data": [datum(long)], "loss_fn": "cross_entropy"}
        big = alice.post(
            "forward", {"model_id": model_id, "seq_id": 2, "forward_input": forward_input}
        )
        assert big.status_code == 200, big.content
        runtime.drain()
        notes = dict(notices.parse_notice(p) for c, p in _notices(conn))
    failed = Operation.objects.get(pk=bad.json()["request_id"])
    assert failed.status == "failed"
    assert notes[failed.pk] == {
        "status": "failed",
        "result": None,
        "error": failed.error,
        "error_category": "user",
    }
    done = Operation.objects.get(pk=big.json()["request_id"])
    assert done.status == "done"
    assert notes[done.pk] is None  # too large to carry: the waiter reads the row
    body = result(alice, runtime, {"request_id": done.pk})
    assert len(body["loss_fn_outputs"][0]["logprobs"]["data"]) == len(long)


def test_the_claim_takes_each_models_next_operation_oldest_first(postgres, alice, runtime) -> None:
    session = open_session(alice)
    a = create_model(alice, runtime, session, seq=0)
    b = create_model(alice, runtime, session, seq=1)
    for model_id, seq in ((a, 2), (b, 1), (a, 1)):  # a's seq 2 waits for its seq 1
        r = alice.post("forward_backward", fwdbwd(model_id, seq, [datum([1, 2, 3])]))
        assert r.status_code == 200, r.content
    heads, samples = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert [(op.model_id, op.seq_id, op.status) for op in heads] == [
        (b, 1, "running"),
        (a, 1, "running"),
    ]
    assert samples == []
    assert {Operation.objects.get(pk=op.pk).status for op in heads} == {"running"}
    # a's seq 2 is not runnable until seq 1 completes, b has nothing left
    assert claim.claim_runnable(fence=runtime.fence, sample_limit=8) == ([], [])
    complete.complete(heads[1], {"loss_fn_outputs": [], "metrics": {}}, runtime.fence)
    heads, _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert [(op.model_id, op.seq_id) for op in heads] == [(a, 2)]


def test_one_statement_completion_meters_as_the_general_path(postgres, alice, runtime) -> None:
    session = open_session(alice)
    model_id = create_model(alice, runtime, session)
    sizes = [3, 5, 8, 13]
    for seq, n in enumerate(sizes, start=1):
        r = alice.post("forward_backward", fwdbwd(model_id, seq, [datum(list(range(1, n + 1)))]))
        assert r.status_code == 200, r.content
    [op], _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    complete.complete(op, {"loss_fn_outputs": [], "metrics": {}}, runtime.fence)
    complete.complete(
        op, {"loss_fn_outputs": [], "metrics": {}}, runtime.fence
    )  # again: nothing more
    runtime.drain()
    ops = Operation.objects.filter(model_id=model_id, kind="forward_backward").order_by("seq_id")
    assert [o.status for o in ops] == ["done"] * len(sizes)
    assert Operation.objects.get(pk=op.pk).result == {"loss_fn_outputs": [], "metrics": {}}
    rows = UsageRecord.objects.filter(model_id=model_id, meter="train_tokens")
    assert sorted(rows.values_list("quantity", flat=True)) == sizes
    assert rows.filter(operation_id=op.pk).count() == 1
    assert rows.first().base_model == runtime.settings.base_model
    written = dict(UsageDaily.objects.values_list("meter").annotate(q=Sum("quantity")))
    daily_rebuild()  # the totals recomputed from the rows, independently
    rebuilt = dict(UsageDaily.objects.values_list("meter").annotate(q=Sum("quantity")))
    assert written == rebuilt
    assert written["train_tokens"] == sum(sizes)


def _adapter(runtime, model_id: str) -> dict:
    return {k: v.clone() for k, v in runtime.host.pool.state_dict(model_id).items()}


def _steps(alice, model_id: str) -> list[dict]:
    """A forward_backward and an optim_step of ``model_id`` (seq_id 1 and 2)."""
    first = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])])).json()
    adam = {"learning_rate": 0.05}
    later = alice.post(
        "optim_step", {"model_id": model_id, "seq_id": 2, "adam_params": adam}
    ).json()
    return [first, later]


def _unharmed_run(alice, runtime, session) -> dict:
    """The adapter after the same two steps with nothing going wrong (same seed)."""
    model_id = create_model(alice, runtime, session, seq=9)
    for fut in _steps(alice, model_id):
        assert "metrics" in result(alice, runtime, fut)
    return _adapter(runtime, model_id)


def test_a_result_the_database_could_not_take_runs_again_once(alice, runtime, monkeypatch) -> None:
    """The engine ran the step but its completion was not recorded (the database went away):
    the host's state of the model took the step, the database's did not. Once the database
    answers, the step is pending again; the model is restored (here from its start) and the
    step runs once more: it ends exactly as if it had run once, and is billed once."""
    session = open_session(alice)
    model_id = create_model(alice, runtime, session)
    first, later = _steps(alice, model_id)
    _database_goes_away_once(monkeypatch)
    with pytest.raises(OperationalError):
        runtime.drain()
    assert Operation.objects.get(pk=first["request_id"]).status == "running"
    assert not runtime.host.has_adapter(model_id)  # its state here no longer counts
    runtime.drain()  # the database answers again
    for fut in (first, later):
        assert "metrics" in result(alice, runtime, fut)
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.cause, recovery.outcome, recovery.replayed) == (
        "state_unrecorded",
        "restored",
        1,  # its create_model: the forward_backward was never recorded, so it ran anew
    )
    usage = UsageRecord.objects.filter(operation_id=first["request_id"])
    assert list(usage.values_list("meter", flat=True)) == ["train_tokens"]  # once
    assert _equal(_adapter(runtime, model_id), _unharmed_run(alice, runtime, session))


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_samples_are_claimed_together_oldest_first(alice, runtime) -> None:
    session = open_session(alice)
    r = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert r.status_code == 200, r.content
    sampler = r.json()["sampling_session_id"]
    prompt = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]}
    ids = []
    for seq in range(1, 6):
        body = {
            "sampling_session_id": sampler,
            "seq_id": seq,
            "num_samples": 1,
            "prompt": prompt,
            "sampling_params": {"max_tokens": 2, "seed": seq},
        }
        r = alice.post("asample", body)
        assert r.status_code == 200, r.content
        ids.append(r.json()["request_id"])
    heads, first = claim.claim_runnable(fence=runtime.fence, sample_limit=3)
    assert heads == [] and [op.pk for op in first] == ids[:3]
    assert all(op.status == "running" for op in first)
    _, rest = claim.claim_runnable(fence=runtime.fence, sample_limit=10)
    assert [op.pk for op in rest] == ids[3:]
    assert claim.claim_runnable(fence=runtime.fence, sample_limit=10) == ([], [])


def test_a_claim_the_database_lost_is_not_applied_twice(alice, runtime, monkeypatch) -> None:
    """The database crashed after the claim (committed without waiting for the disk) and came
    back without it: the step that ran is pending again. Its completion notices; the model is
    restored before the step runs again, so the step is applied once."""
    session = open_session(alice)
    model_id = create_model(alice, runtime, session)
    first, later = _steps(alice, model_id)
    real = runtime.recorder.finish
    ran: list[str] = []

    def crash_after_running(op, outcome):
        ran.append(op.pk)
        if len(ran) == 1:
            Operation.objects.filter(pk=op.pk).update(status="pending", started_at=None)
        return real(op, outcome)

    monkeypatch.setattr(runtime.recorder, "finish", crash_after_running)
    runtime.drain()
    for fut in (first, later):
        assert "metrics" in result(alice, runtime, fut)
    assert ran == [first["request_id"], first["request_id"], later["request_id"]]
    assert TrainingModel.objects.get(pk=model_id).state == "ready"
    assert _equal(_adapter(runtime, model_id), _unharmed_run(alice, runtime, session))


def test_samples_the_database_could_not_take_run_again(alice, runtime, monkeypatch) -> None:
    """A batch of samples ran, then the database went away while recording them: none is left
    running; once the database answers, each runs again (a sample changes nothing on the host)
    and, seeded, draws the same tokens."""
    session = open_session(alice)
    r = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    sampler = r.json()["sampling_session_id"]
    prompt = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]}
    futures = [
        alice.post(
            "asample",
            {
                "sampling_session_id": sampler,
                "seq_id": seq,
                "num_samples": 1,
                "prompt": prompt,
                "sampling_params": {"max_tokens": 2, "seed": seq},
            },
        ).json()
        for seq in (1, 2)
    ]
    real = complete.complete
    first_run: dict[str, list] = {}

    def gone(op, result, fence):  # the first completion fails; the rest are not even tried
        first_run[op.pk] = [s["tokens"] for s in result["sequences"]]
        monkeypatch.setattr(complete, "complete", real)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(complete, "complete", gone)
    with pytest.raises(OperationalError):
        runtime.drain()
    assert not Operation.objects.filter(status="pending").exists()
    runtime.drain()  # the database answers again
    for fut in futures:
        body = result(alice, runtime, fut)
        if fut["request_id"] in first_run:
            assert [s["tokens"] for s in body["sequences"]] == first_run[fut["request_id"]]
    again = alice.post(
        "asample",
        {
            "sampling_session_id": sampler,
            "seq_id": 3,
            "num_samples": 1,
            "prompt": prompt,
            "sampling_params": {"max_tokens": 2},
        },
    ).json()
    assert "sequences" in result(alice, runtime, again)


def test_a_claim_commits_by_itself_and_leaves_later_commits_durable(
    postgres, alice, runtime
) -> None:
    model_id = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])]))
    [claimed], _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert claimed.pk == r.json()["request_id"] and not connection.in_atomic_block
    with psycopg.connect(**pg_listen.connect_params()) as other:  # committed: others see it
        status = other.execute(
            f"SELECT status FROM {Operation._meta.db_table} WHERE id = %s", [claimed.pk]
        ).fetchone()
    assert status == ("running",)
    with connection.cursor() as cursor:  # not flushing was for the claim's own commit only
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)
    # the claimed row, as the ORM reads it
    stored = Operation.objects.get(pk=claimed.pk)
    for field in Operation._meta.concrete_fields:
        assert getattr(claimed, field.attname) == getattr(stored, field.attname), field.name


def test_a_step_on_an_idle_worker_takes_two_statements(postgres, alice, runtime) -> None:
    """The claim, and the completion, which also looks for more work: with none, that is all."""
    model_id = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])]))
    with CaptureQueriesContext(connection) as queries:
        assert runtime.drain() == 1
    statements = [q["sql"].split()[0] for q in queries]
    assert statements == ["UPDATE", "WITH"], statements
    assert Operation.objects.get(pk=r.json()["request_id"]).status == "done"


def test_what_the_completion_finds_waiting_is_run_in_the_same_drain(
    postgres, alice, runtime
) -> None:
    model_id = create_model(alice, runtime, open_session(alice))
    for seq in (1, 2):  # the second becomes runnable only when the first completes
        r = alice.post("forward_backward", fwdbwd(model_id, seq, [datum([1, 2, 3])]))
        assert r.status_code == 200, r.content
    [first], _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert complete.complete(first, {"loss_fn_outputs": [], "metrics": {}}, runtime.fence) is True
    [second], _ = claim.claim_runnable(fence=runtime.fence, sample_limit=8)
    assert complete.complete(second, {"loss_fn_outputs": [], "metrics": {}}, runtime.fence) is False
    for seq in (3, 4):
        alice.post("forward_backward", fwdbwd(model_id, seq, [datum([1, 2, 3])]))
    assert runtime.drain() == 2  # one drain: the look after seq 3 found seq 4
    ops = Operation.objects.filter(model_id=model_id, kind="forward_backward")
    assert sorted(ops.values_list("status", flat=True)) == ["done"] * 4


def test_a_finished_future_is_read_once(postgres, alice, charlie, runtime) -> None:
    """retrieve_future of an operation that has finished answers from the row its lookup read:
    no second look at it, no wait for a notice; the answer is the stored result."""
    model_id = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])]))
    request_id = r.json()["request_id"]
    runtime.drain()
    stored = Operation.objects.get(pk=request_id)
    with CaptureQueriesContext(connection) as queries:
        answer = alice.post("retrieve_future", {"request_id": request_id})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {k: v for k, v in stored.result.items() if not k.startswith("_")}
    reads = [q["sql"] for q in queries if 'FROM "training_sessions_operation"' in q["sql"]]
    assert len(reads) == 1, reads
    assert charlie.post("retrieve_future", {"request_id": request_id}).status_code == 404
