"""A sample's submit in one statement (``sample_statement``): it writes exactly what the general
path writes, or nothing at all, and everything it does not take is answered by the general path
as before. The wire tests of sampling run here again, on this path: outside a test transaction,
where the statement commits by itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audit_event
from controlplane.fleet.models import BaseModel
from controlplane.iam.resources import sampler_arn
from controlplane.operations import sample_statement, sampling
from controlplane.operations.admission import TOUCH_SECONDS
from controlplane.training_sessions.models import Operation, SamplingSession, Session
from tests.controlplane.api.test_api_training import (  # noqa: F401
    test_sample_batches_several_requests_and_isolates_a_bad_one,
    test_training_flow_checkpoints_sampling_and_stop,
)
from tests.controlplane.api.test_hostile_inputs import (  # noqa: F401
    model,
    test_token_ids_past_the_vocabulary_are_refused_on_arrival,
)
from tests.controlplane.api.test_streamed_answers import (  # noqa: F401
    test_samples_and_new_models_stream_too,
)
from tests.controlplane.test_refused_once import (  # noqa: F401
    test_a_denied_sample_is_recorded_once,
)
from tests.controlplane.training_sessions.test_context_setting import (  # noqa: F401
    test_a_sampler_is_held_to_its_context,
)
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, open_session, result

pytestmark = pytest.mark.django_db(transaction=True)

OPS = Operation._meta.db_table


@pytest.fixture(autouse=True)
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement submit is PostgreSQL's")


def _sampler(person, session: str, seq: int, **source) -> str:
    r = person.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": seq, **(source or {"base_model": TINY})},
    )
    assert r.status_code == 200, r.content
    return r.json()["sampling_session_id"]


def _body(sampler: str, seq_id: int | None = None, tokens=(1, 2, 3), **params) -> dict:
    body = {
        "sampling_session_id": sampler,
        "num_samples": 1,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": list(tokens)}]},
        "sampling_params": {"max_tokens": 2, "temperature": 0.0, "stop": [], **params},
    }
    if seq_id is not None:
        body["seq_id"] = seq_id
    return body


def _reads_or_writes_a_sample(sql: str) -> bool:
    return "training_sessions_" in sql or "audit_auditevent" in sql


def _differing_fields(a, b, skip: set[str]) -> dict:
    return {
        f.name: (getattr(a, f.attname), getattr(b, f.attname))
        for f in type(a)._meta.concrete_fields
        if f.name not in skip and getattr(a, f.attname) != getattr(b, f.attname)
    }


@pytest.mark.parametrize("on_model", [False, True])
def test_it_writes_what_the_general_path_writes(alice, runtime, monkeypatch, on_model) -> None:
    session = open_session(alice)
    if on_model:
        model_id = create_model(alice, runtime, session)
        fast, general = (_sampler(alice, session, n, model_id=model_id) for n in (0, 1))
    else:
        fast, general = _sampler(alice, session, 0), _sampler(alice, session, 1)
    long_ago = timezone.now() - timedelta(minutes=5)
    written = {}
    for sampler, one_statement in ((fast, True), (general, False)):
        Session.objects.filter(pk=session).update(last_heartbeat_at=long_ago)
        monkeypatch.setattr(sample_statement, "available", lambda one=one_statement: one)
        before = AuditEvent.objects.count()
        with CaptureQueriesContext(connection) as queries:
            r = alice.post("asample", _body(sampler, seq_id=1))
        assert r.status_code == 200, r.content
        inserts = [q["sql"] for q in queries if f'INSERT INTO "{OPS}"' in q["sql"]]
        assert len(inserts) == 1
        if one_statement:  # the audit row and the sign of life are in that statement
            assert [q["sql"] for q in queries if _reads_or_writes_a_sample(q["sql"])] == inserts
            assert 'INSERT INTO "audit_auditevent"' in inserts[0]
        written[one_statement] = (
            Operation.objects.get(pk=r.json()["request_id"]),
            list(AuditEvent.objects.order_by("id")[before:]),
            Session.objects.get(pk=session).last_heartbeat_at > long_ago,
        )
    (op, audit, touched), (op2, audit2, touched2) = written[True], written[False]
    assert (op.sampling_session_id, op2.sampling_session_id) == (fast, general)
    assert _differing_fields(op, op2, {"id", "sampling_session", "created_at"}) == {}
    assert op.plan == {"base_model": TINY, "adapter": model_id if on_model else None}
    assert [e.action for e in audit] == [e.action for e in audit2] == ["sessions:Sample"]
    assert _differing_fields(audit[0], audit2[0], {"id", "at", "resource"}) == {}
    assert (audit[0].resource, audit2[0].resource) == (
        sampler_arn(alice.tenant, fast),
        sampler_arn(alice.tenant, general),
    )
    assert touched and touched2
    assert len(result(alice, runtime, {"request_id": op.pk})["sequences"]) == 1


def _audit(person, sampler: str) -> AuditEvent:
    return audit_event(
        tenant=person.tenant,
        principal=f"arn:test:{person.name}",
        action="sessions:Sample",
        resource=sampler_arn(person.tenant, sampler),
        allowed=True,
        effect="Allow",
        mutating=True,
    )


def test_what_it_does_not_take_it_leaves_untouched(alice, charlie, runtime) -> None:
    session = open_session(alice)
    sampler = _sampler(alice, session, 0)
    small = _sampler(alice, session, 1)
    SamplingSession.objects.filter(pk=small).update(context_length=8)
    stopped = _sampler(alice, open_session(alice), 0)
    Session.objects.filter(sampling_sessions=stopped).update(state=Session.State.STOPPED)
    saved = _sampler(alice, session, 2)
    SamplingSession.objects.filter(pk=saved).update(storage_path="somewhere")
    vocab = BaseModel.objects.get(name=TINY).vocab_size
    assert alice.post("asample", _body(sampler, seq_id=1)).status_code == 200
    refused = {
        "a seq_id already used": (alice, sampler, 1, {}),
        "another tenant's sampler": (charlie, sampler, 2, {}),
        "a sampler that does not exist": (alice, "sampler-nope", 2, {}),
        "a stopped session": (alice, stopped, 1, {}),
        "a sampler on saved weights": (alice, saved, 1, {}),
        "a prompt token past the vocabulary": (alice, sampler, 2, {"tokens": [1, vocab]}),
        "a stop token past the vocabulary": (alice, sampler, 2, {"stop": [vocab]}),
        "a bias past the vocabulary": (alice, sampler, 2, {"logit_bias": {str(vocab): 1.0}}),
        "past the sampler's context": (alice, small, 1, {"tokens": [1] * 7}),
    }
    for why, (person, sampler_id, seq_id, change) in refused.items():
        body = _body(sampler_id, seq_id, tokens=change.pop("tokens", (1, 2, 3)), **change)
        payload = {k: body[k] for k in ("num_samples", "prompt", "sampling_params")}
        audited, ops = AuditEvent.objects.count(), Operation.objects.count()
        op = sampling.sample_in_one_statement(
            tenant=person.tenant,
            sampling_session_id=sampler_id,
            seq_id=seq_id,
            payload=payload,
            audit=_audit(person, sampler_id),
        )
        assert op is None, why
        assert (AuditEvent.objects.count(), Operation.objects.count()) == (audited, ops), why
    fits = {k: v for k, v in _body(small, 1, tokens=[1] * 6).items() if k != "seq_id"}
    del fits["sampling_session_id"]
    op = sampling.sample_in_one_statement(
        tenant=alice.tenant,
        sampling_session_id=small,
        seq_id=1,
        payload=fits,
        audit=_audit(alice, small),
    )  # 6 + 2 tokens: exactly the context
    assert op is not None and Operation.objects.get(pk=op.pk).sampling_session_id == small


def test_a_retry_gets_its_operation_and_another_body_a_conflict(alice, charlie, runtime) -> None:
    sampler = _sampler(alice, open_session(alice), 0)
    first = alice.post("asample", _body(sampler, seq_id=3))
    assert first.status_code == 200, first.content
    again = alice.post("asample", _body(sampler, seq_id=3))
    assert again.status_code == 200 and again.json() == first.json()
    other = alice.post("asample", _body(sampler, seq_id=3, tokens=(4, 5)))
    assert other.status_code == 409 and other.json()["field"] == "seq_id"
    assert Operation.objects.filter(sampling_session_id=sampler).count() == 1
    unnumbered = [alice.post("asample", _body(sampler)) for _ in range(2)]
    assert all(r.status_code == 200 for r in unnumbered)
    assert len({r.json()["request_id"] for r in unnumbered}) == 2  # two requests, two samples
    assert charlie.post("asample", _body(sampler, seq_id=4)).status_code == 404


def test_a_denied_sample_writes_nothing_but_its_refusal(alice, runtime) -> None:
    sampler = _sampler(alice, open_session(alice), 0)
    audit = _audit(alice, sampler)
    audit.allowed = False
    body = _body(sampler, 1)
    payload = {k: body[k] for k in ("num_samples", "prompt", "sampling_params")}
    ops = Operation.objects.count()
    assert (
        sampling.sample_in_one_statement(
            tenant=alice.tenant,
            sampling_session_id=sampler,
            seq_id=1,
            payload=payload,
            audit=audit,
        )
        is None
    )
    assert Operation.objects.count() == ops


def test_its_sign_of_life_is_written_at_most_once_a_few_seconds(alice, runtime) -> None:
    session = open_session(alice)
    sampler = _sampler(alice, session, 0)
    long_ago = timezone.now() - timedelta(seconds=TOUCH_SECONDS + 60)
    Session.objects.filter(pk=session).update(last_heartbeat_at=long_ago)
    with CaptureQueriesContext(connection) as queries:
        assert alice.post("asample", _body(sampler)).status_code == 200
    assert len([q for q in queries if _reads_or_writes_a_sample(q["sql"])]) == 1
    beat = Session.objects.get(pk=session).last_heartbeat_at
    assert beat > long_ago
    assert alice.post("asample", _body(sampler)).status_code == 200  # just marked: not again
    assert Session.objects.get(pk=session).last_heartbeat_at == beat
    stale = timezone.now() - timedelta(seconds=TOUCH_SECONDS + 1)
    Session.objects.filter(pk=session).update(last_heartbeat_at=stale)
    assert alice.post("asample", _body(sampler)).status_code == 200
    assert Session.objects.get(pk=session).last_heartbeat_at > stale
