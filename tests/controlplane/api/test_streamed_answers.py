"""A submit that prefers to wait (``Prefer: wait=N``) gets its future's handle at once and its
outcome on the same response, as NDJSON: the line ``retrieve_future`` would have answered.
Without the preference (the official tinker SDK) the answer is the handle alone."""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane import pg_listen
from controlplane.audit.models import AuditEvent
from controlplane.operations import notices
from controlplane.training_sessions.models import Operation, TrainingModel
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db

WAIT = {"HTTP_PREFER": "wait=5"}
DENY_RETRIEVE = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Deny", "Action": "sessions:RetrieveFuture", "Resource": "*"}],
}


def lines(response) -> list[dict]:
    assert response["Content-Type"] == "application/x-ndjson", response.get("Content-Type")
    body = b"".join(response.streaming_content)
    assert body.endswith(b"\n")
    return [json.loads(line) for line in body.splitlines()]


def retrieved(person, request_id: str) -> dict:
    r = person.post("retrieve_future", {"request_id": request_id})
    assert r.status_code == 200, r.content
    return r.json()


def test_a_step_that_prefers_to_wait_gets_its_handle_then_its_result(
    alice, charlie, runtime
) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3])]), **WAIT)
    assert r.status_code == 200 and r["Preference-Applied"] == "wait=0.2"  # capped: the poll's
    runtime.drain()
    handle, outcome = lines(r)
    assert handle == {"request_id": handle["request_id"], "model_id": mid}
    assert outcome["metrics"]["tokens:sum"] == 3.0
    assert outcome == retrieved(alice, handle["request_id"])  # the same answer as a poll
    # another tenant: the model is not found, streamed or not
    for extra in ({}, WAIT):
        other = charlie.post("forward_backward", fwdbwd(mid, 2, [datum([1])]), **extra)
        assert other.status_code == 404 and other["Content-Type"] == "application/json"
    assert charlie.post("retrieve_future", {"request_id": handle["request_id"]}).status_code == 404


def test_without_the_preference_the_answer_is_the_handle_alone(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])]))
    assert r.status_code == 200 and r["Content-Type"] == "application/json"
    assert set(r.json()) == {"request_id", "model_id"}
    assert "Preference-Applied" not in r


def test_a_failed_operation_streams_its_error(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2], targets=[1])]), **WAIT)
    runtime.drain()
    handle, outcome = lines(r)
    assert outcome["category"] == "user" and "data[0]" in outcome["error"]
    assert outcome == retrieved(alice, handle["request_id"])


def test_an_outcome_not_there_in_time_streams_try_again_and_can_be_polled(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    late = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])]), **WAIT)
    handle, outcome = lines(late)  # seq_id 1 has not come: it waits (the test poll: 0.2 s)
    assert outcome == {
        "type": "try_again",
        "request_id": handle["request_id"],
        "queue_state": "active",
    }
    alice.post("forward_backward", fwdbwd(mid, 1, [datum([3])]))
    runtime.drain()
    assert "metrics" in retrieved(alice, handle["request_id"])


def test_a_retry_streams_the_same_operation(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    body = fwdbwd(mid, 1, [datum([4, 5, 6])])
    first = alice.post("forward_backward", body, **WAIT)
    runtime.drain()
    again = alice.post("forward_backward", body, **WAIT)
    assert lines(first) == lines(again)


def test_samples_and_new_models_stream_too(alice, runtime) -> None:
    sid = open_session(alice)
    r = alice.post(
        "create_model",
        {"session_id": sid, "model_seq_id": 0, "base_model": TINY, "lora_config": {"rank": 4}},
        **WAIT,
    )
    runtime.drain()
    handle, created = lines(r)
    mid = handle["model_id"]
    assert created == {"model_id": mid}
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": sid, "model_id": mid, "sampling_session_seq_id": 0},
    ).json()["sampling_session_id"]
    sample = {
        "sampling_session_id": sampler,
        "seq_id": 1,
        "num_samples": 2,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 3, "seed": 1},
    }
    r = alice.post("asample", sample, **WAIT)
    runtime.drain()
    handle, sampled = lines(r)
    assert [len(s["tokens"]) for s in sampled["sequences"]] == [3, 3]
    assert sampled == retrieved(alice, handle["request_id"])


def test_who_may_not_retrieve_futures_gets_the_handle_alone_and_the_refusal_is_audited(
    alice, bob, runtime
) -> None:
    mid = create_model(bob, runtime, open_session(bob))
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-futures",
        {"document": DENY_RETRIEVE},
        format="json",
    )
    assert r.status_code == 200, r.content
    r = bob.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])]), **WAIT)
    assert r.status_code == 200 and r["Content-Type"] == "application/json"
    assert bob.post("retrieve_future", {"request_id": r.json()["request_id"]}).status_code == 403
    refused = AuditEvent.objects.filter(action="sessions:RetrieveFuture", allowed=False)
    assert refused.count() == 2  # the one in the submit, and the poll's


def test_a_streamed_submit_is_audited_once(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    before = AuditEvent.objects.count()
    r = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])]), **WAIT)
    runtime.drain()
    lines(r)
    new = AuditEvent.objects.order_by("id")[before:]
    assert [(e.action, e.allowed) for e in new] == [("sessions:ForwardBackward", True)]


@pytest.mark.django_db(transaction=True)
def test_the_outcome_comes_from_the_notice_without_reading_the_row(
    settings, alice, runtime
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("notices are PostgreSQL's")
    settings.NOTIFY_ON_COMPLETION = True
    settings.LONG_POLL_SECONDS = 10
    mid = create_model(alice, runtime, open_session(alice))
    r = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3])]), **WAIT)
    runtime.drain()  # its notice reaches the listener, which was listening before the insert
    with CaptureQueriesContext(connection) as queries:
        handle, outcome = lines(r)
    assert outcome["metrics"]["tokens:sum"] == 3.0
    assert [q["sql"] for q in queries] == []
    assert outcome == retrieved(alice, handle["request_id"])


@pytest.mark.django_db(transaction=True)
def test_listening_ahead_never_holds_a_submit_up(settings) -> None:
    """Before LISTEN is in place, a waiter registered ahead of an insert does not wait for it:
    it is marked as not listening, and its wait looks at the row instead."""
    if connection.vendor != "postgresql":
        pytest.skip("notices are PostgreSQL's")
    settings.NOTIFY_ON_COMPLETION = True
    pg_listen.listener.stop()
    started = time.monotonic()
    with notices.listening("req-ahead") as waiter:
        assert time.monotonic() - started < 0.5 and waiter is not None
        assert waiter.listening is False
    deadline = time.monotonic() + 5  # it started the listener, which is soon in place
    while not pg_listen.listener.ensure_listening() and time.monotonic() < deadline:
        time.sleep(0.05)
    with notices.listening("req-later") as later:
        assert later is not None and later.listening is True
    assert not registered("req-ahead") and not registered("req-later")


def registered(request_id: str) -> bool:
    return bool(notices.waiting._waiting.get(request_id))


@pytest.mark.django_db(transaction=True)
def test_a_waiter_is_unregistered_however_its_block_ends(settings) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("notices are PostgreSQL's")
    settings.NOTIFY_ON_COMPLETION = True
    with (
        pytest.raises(RuntimeError, match="the insert failed"),
        notices.listening("req-raises") as waiter,
    ):
        assert waiter is not None and registered("req-raises")
        raise RuntimeError("the insert failed")
    assert not registered("req-raises")
    with notices.listening("req-plain"):
        assert registered("req-plain")
    assert not registered("req-plain")
    with notices.listening("req-kept") as kept:  # handed to a later wait, which releases it
        release = kept.keep()
    assert registered("req-kept")
    release()
    release()  # again: a no-op
    assert not registered("req-kept")


@pytest.mark.django_db(transaction=True)
def test_refused_and_plain_submits_leave_no_waiter(settings, alice, bob, charlie, runtime) -> None:
    """Every way a submit that prefers to wait ends (refused before the insert, answered with
    the handle alone, streamed to its end) leaves nothing listening."""
    if connection.vendor != "postgresql":
        pytest.skip("notices are PostgreSQL's")
    settings.NOTIFY_ON_COMPLETION = True
    mid = create_model(alice, runtime, open_session(alice))
    assert charlie.post("forward_backward", fwdbwd(mid, 1, [datum([1])]), **WAIT).status_code == 404
    r = alice.post("forward_backward", {"model_id": mid, "seq_id": 1}, **WAIT)
    assert r.status_code == 400, r.content
    assert notices.waiting._waiting == {}
    r = alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])]), **WAIT)
    runtime.drain()
    lines(r)
    assert notices.waiting._waiting == {}
    bobs = create_model(bob, runtime, open_session(bob))
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-futures",
        {"document": DENY_RETRIEVE},
        format="json",
    )
    assert r.status_code == 200, r.content
    r = bob.post("forward_backward", fwdbwd(bobs, 1, [datum([1, 2])]), **WAIT)
    assert r.status_code == 200 and r["Content-Type"] == "application/json"  # the handle alone
    assert notices.waiting._waiting == {}


@pytest.mark.django_db(transaction=True)
def test_a_completion_between_the_insert_and_the_wait_is_not_missed(
    settings, alice, runtime
) -> None:
    """The operation finishes (its notice sent and heard) after its insert and before anyone
    waits: the wait answers from the notice at once, without reading the row."""
    if connection.vendor != "postgresql":
        pytest.skip("notices are PostgreSQL's")
    settings.NOTIFY_ON_COMPLETION = True
    mid = create_model(alice, runtime, open_session(alice))
    model = TrainingModel.objects.get(pk=mid)
    with notices.listening("req-between", wait=5) as waiter:
        assert waiter is not None and waiter.listening is True
        op = Operation.objects.create(
            id="req-between",
            tenant=model.tenant,
            session_id=model.session_id,
            model=model,
            seq_id=1,
            kind=Operation.Kind.OPTIM_STEP,
            payload={},
            payload_digest="",
        )
        Operation.objects.filter(pk=op.pk).update(
            status=Operation.Status.DONE, result={"metrics": {"n": 1.0}}
        )
        assert waiter.event.wait(10)  # the listener heard it; nobody waits yet
        assert op.status == Operation.Status.PENDING  # the stale row the submit holds
        with CaptureQueriesContext(connection) as queries:
            done = notices.wait_finished(op, time.monotonic() + 0.5, waiter)
        assert done.status == Operation.Status.DONE
        assert done.result == {"metrics": {"n": 1.0}}
        assert [q["sql"] for q in queries] == []
    assert not registered("req-between")
