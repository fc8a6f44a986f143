"""A training step's submit in one statement (``step_statement``): it writes exactly what the
general path writes, or nothing at all, and everything it does not take is answered by the
general path as before. The wire tests of training run here again, on this path: outside a
test transaction, where the statement commits by itself."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane import pg_listen
from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audit_event
from controlplane.iam.resources import model_arn
from controlplane.operations import step_statement
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from tests.controlplane.api.test_api_training import (  # noqa: F401
    test_a_request_refused_on_arrival_does_not_block_later_ones,
    test_a_training_steps_refusals_come_in_order,
    test_bad_operation_fails_with_user_category_and_session_stays_usable,
    test_out_of_order_and_duplicate_requests_run_once_in_seq_order,
    test_training_flow_checkpoints_sampling_and_stop,
    test_waiting_for_a_missing_seq_id,
)
from tests.controlplane.budgets.test_token_budget import (  # noqa: F401
    test_requests_run_below_the_budget_and_are_402_once_it_is_reached,
)
from tests.controlplane.iam.test_api_iam import (
    test_an_inline_deny_stops_training_and_the_audit_log_says_why,  # noqa: F401
)
from tests.controlplane.test_dimuon_api import (  # noqa: F401
    test_each_model_steps_with_its_own_family_and_refuses_the_other,
)
from tests.controlplane.training_sessions.test_context_setting import (  # noqa: F401
    test_a_model_asks_for_a_context_and_its_data_are_held_to_it,
)
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db(transaction=True)

OPS = Operation._meta.db_table


@pytest.fixture(autouse=True)
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement submit is PostgreSQL's")


def _differing_fields(a, b, skip: set[str]) -> dict:
    """The fields (but ``skip``) where two rows differ, with both values."""
    return {
        f.name: (getattr(a, f.attname), getattr(b, f.attname))
        for f in type(a)._meta.concrete_fields
        if f.name not in skip and getattr(a, f.attname) != getattr(b, f.attname)
    }


def test_it_writes_what_the_general_path_writes(alice, runtime, monkeypatch) -> None:
    session = open_session(alice)
    fast, general = (
        create_model(alice, runtime, session, 0),
        create_model(alice, runtime, session, 1),
    )
    long_ago = timezone.now() - timedelta(minutes=5)
    TrainingModel.objects.filter(pk__in=[fast, general]).update(last_request_at=long_ago)
    written = {}
    for model_id, one_statement in ((fast, True), (general, False)):
        Session.objects.filter(pk=session).update(last_heartbeat_at=long_ago)
        monkeypatch.setattr(step_statement, "available", lambda one=one_statement: one)
        before = AuditEvent.objects.count()
        with CaptureQueriesContext(connection) as queries:
            r = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])]))
        assert r.status_code == 200, r.content
        inserts = [q["sql"] for q in queries if f'INSERT INTO "{OPS}"' in q["sql"]]
        assert len(inserts) == 1
        if one_statement:  # the audit row and the signs of life are in that statement
            assert 'INSERT INTO "audit_auditevent"' in inserts[0]
            assert not any(
                "audit_auditevent" in q["sql"] for q in queries if q["sql"] != inserts[0]
            )
        model = TrainingModel.objects.get(pk=model_id)
        beat = Session.objects.get(pk=session).last_heartbeat_at
        written[one_statement] = (
            Operation.objects.get(pk=r.json()["request_id"]),
            list(AuditEvent.objects.order_by("id")[before:]),
            model.last_request_at > long_ago and beat > long_ago,
        )
    (op, audit, touched), (op2, audit2, touched2) = written[True], written[False]
    assert op.plan == {"adapter": fast, "base_model": op.plan["base_model"]}
    assert _differing_fields(op, op2, {"id", "model", "plan", "created_at"}) == {}
    assert op2.plan == {**op.plan, "adapter": general}
    assert [e.action for e in audit] == [e.action for e in audit2] == ["sessions:ForwardBackward"]
    assert _differing_fields(audit[0], audit2[0], {"id", "at", "resource"}) == {}
    assert (audit[0].resource, audit2[0].resource) == (
        model_arn(alice.tenant, fast),
        model_arn(alice.tenant, general),
    )
    assert touched and touched2
    assert result(alice, runtime, {"request_id": op.pk})["metrics"]["tokens:sum"] == 3.0


def test_what_it_does_not_take_it_leaves_untouched(alice, charlie, runtime) -> None:
    session = open_session(alice)
    model_id = create_model(alice, runtime, session)
    assert alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1])])).status_code == 200
    runtime.drain()
    refused = {
        "a seq_id behind the model": (alice, fwdbwd(model_id, 1, [datum([2])])),
        "another tenant's model": (charlie, fwdbwd(model_id, 2, [datum([2])])),
        "a model that does not exist": (alice, fwdbwd("model-nope", 2, [datum([2])])),
    }
    for why, (person, body) in refused.items():
        audited, ops = AuditEvent.objects.count(), Operation.objects.count()
        op = step_statement.submit(
            tenant=person.tenant,
            model_id=body["model_id"],
            seq_id=body["seq_id"],
            kind="forward_backward",
            payload={"forward_backward_input": body["forward_backward_input"]},
            audit=_audit(person, body["model_id"]),
        )
        assert op is None, why
        assert (AuditEvent.objects.count(), Operation.objects.count()) == (audited, ops), why


def test_an_optim_step_of_another_family_is_left_to_the_general_path(alice, runtime) -> None:
    from tests.controlplane.test_dimuon_api import DIMUON, DIMUON_STEP, create

    model_id = create(alice, runtime, open_session(alice), 0, DIMUON)
    audited, ops = AuditEvent.objects.count(), Operation.objects.count()

    def submit(family: str):
        key, params = (
            ("optimizer_params", DIMUON_STEP) if family == "dimuon" else ("adam_params", {})
        )
        return step_statement.submit(
            tenant=alice.tenant,
            model_id=model_id,
            seq_id=1,
            kind="optim_step",
            payload={key: params},
            audit=_audit(alice, model_id),
            optimizer=family,
        )

    assert submit("adamw") is None
    assert (AuditEvent.objects.count(), Operation.objects.count()) == (audited, ops)
    taken = submit("dimuon")
    assert taken is not None and Operation.objects.get(pk=taken.pk).seq_id == 1


def test_a_concurrent_insert_of_the_same_seq_id_changes_nothing(alice, runtime) -> None:
    """Another transaction holds the model and inserts the same seq_id meanwhile: the statement
    waits for the lock, then its insert collides; nothing of it is written."""
    model_id = create_model(alice, runtime, open_session(alice))
    audited = AuditEvent.objects.count()
    op = _while_another_request_takes_seq_1(
        model_id,
        lambda: step_statement.submit(
            tenant=alice.tenant,
            model_id=model_id,
            seq_id=1,
            kind="forward_backward",
            payload={"forward_backward_input": {"data": [datum([1])], "loss_fn": "cross_entropy"}},
            audit=_audit(alice, model_id),
        ),
    )
    assert op is None
    assert list(
        Operation.objects.filter(model_id=model_id, seq_id=1).values_list("id", flat=True)
    ) == ["req-other"]
    assert AuditEvent.objects.count() == audited


def _while_another_request_takes_seq_1(model_id: str, submit, digest: str | None = None):
    """What ``submit`` returns when, while it waits for the model's lock, another transaction
    holding it inserts the model's seq_id 1 (``req-other``, with ``digest``, else that of the
    model's seq_id 0) and commits."""
    other = psycopg.connect(**pg_listen.connect_params())
    other.execute(
        f"SELECT 1 FROM {TrainingModel._meta.db_table} WHERE id = %s FOR UPDATE", [model_id]
    )
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = submit()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        thread.join(0.5)
        assert thread.is_alive()  # waiting for the model's lock
        q = connection.ops.quote_name
        columns = [q(f.column) for f in Operation._meta.concrete_fields]
        replaced = {q("id"): "'req-other'", q("seq_id"): "1"}
        if digest is not None:
            replaced[q("payload_digest")] = "%s"
        copied = [replaced.get(c, c) for c in columns]
        other.execute(
            f"INSERT INTO {q(OPS)} ({', '.join(columns)}) SELECT {', '.join(copied)} "
            f"FROM {q(OPS)} WHERE model_id = %s AND seq_id = 0",
            [*([digest] if digest is not None else []), model_id],
        )
        other.commit()
    finally:
        other.close()  # (a failure above rolls back and lets the submit go on)
    thread.join(10)
    return outcome["value"]


def _audit(person, model_id: str) -> AuditEvent:
    return audit_event(
        tenant=person.tenant,
        principal=f"arn:test:{person.name}",
        action="sessions:ForwardBackward",
        resource=model_arn(person.tenant, model_id),
        allowed=True,
        effect="Allow",
        mutating=True,
    )


def test_without_notices_the_worker_is_woken_through_the_broker(
    settings, alice, runtime, monkeypatch
) -> None:
    from controlplane import dispatch

    model_id = create_model(alice, runtime, open_session(alice))
    settings.WAKE_WORKERS_BY_NOTIFY = False
    sent: list[tuple[str, str]] = []

    class Broker:
        def send_task(self, name: str, queue: str) -> None:
            sent.append((name, queue))

    monkeypatch.setattr(dispatch, "celery_client", lambda: Broker())
    r = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2])]))
    assert r.status_code == 200, r.content
    assert sent == [(dispatch.DRAIN_TASK, runtime.worker.queue)]


@pytest.mark.parametrize("same_body", [True, False])
def test_the_general_path_answers_a_seq_id_taken_while_it_waited_for_the_lock(
    alice, runtime, monkeypatch, same_body
) -> None:
    """A request inserted the seq_id while this one waited for the model's lock (a retry racing
    its original): it is answered as a retry, or refused as a conflict, never a 500."""
    from controlplane.operations.admission import digest
    from loopwright.types import ForwardBackwardRequest

    monkeypatch.setattr(step_statement, "available", lambda: False)
    model_id = create_model(alice, runtime, open_session(alice))
    body = fwdbwd(model_id, 1, [datum([1, 2])])
    payload = ForwardBackwardRequest.model_validate(body).model_dump(
        mode="json", exclude={"seq_id", "model_id", "type"}
    )
    r = _while_another_request_takes_seq_1(
        model_id,
        lambda: alice.post("forward_backward", body),
        digest(payload) if same_body else "another body",
    )
    if same_body:
        assert r.status_code == 200 and r.json()["request_id"] == "req-other"
    else:
        assert r.status_code == 409 and r.json()["field"] == "seq_id"
        assert "req-other" in r.json()["detail"]
