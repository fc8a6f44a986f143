"""A refused training request is recorded once: one audit row for its IAM decision (when it got
that far) and one failed operation under its seq_id, whichever step refused it."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db

DENY_FORWARD = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Deny", "Action": "sessions:Forward*", "Resource": "*"}],
}
DENY_SAMPLE = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Deny", "Action": "sessions:Sample", "Resource": "*"}],
}


def records(tenant, model_id: str, action: str) -> tuple[list, list]:
    audit = list(
        AuditEvent.objects.filter(tenant=tenant, action=action).values_list("allowed", flat=True)
    )
    failed = list(
        Operation.objects.filter(model_id=model_id, status=Operation.Status.FAILED).values_list(
            "seq_id", "error"
        )
    )
    return audit, failed


@pytest.mark.parametrize("path", ["forward", "forward_backward", "optim_step"])
def test_a_body_that_does_not_validate_is_recorded_once(alice, charlie, runtime, path) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    action = {"forward": "sessions:Forward", "optim_step": "sessions:OptimStep"}.get(
        path, "sessions:ForwardBackward"
    )
    r = alice.post(path, {"model_id": mid, "seq_id": 1, "unknown": 1})
    assert r.status_code == 400, r.content
    audit, failed = records(alice.tenant, mid, action)
    assert audit == [True]  # allowed by IAM, refused by the body's check
    assert len(failed) == 1 and failed[0][0] == 1 and "refused on arrival" in failed[0][1]
    # another tenant: not found, and nothing of alice's is touched
    body = fwdbwd(mid, 2, [datum([1])])
    if path == "forward":
        body = {"model_id": mid, "seq_id": 2, "forward_input": body["forward_backward_input"]}
    elif path == "optim_step":
        body = {"model_id": mid, "seq_id": 2, "adam_params": {"learning_rate": 1e-3}}
    r = charlie.post(path, body)
    assert r.status_code == 404, r.content
    assert records(alice.tenant, mid, action) == (audit, failed)


def test_a_body_that_does_not_parse_is_recorded_once(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    r = alice.client.post(
        "/api/v1/forward_backward",
        b'{"model_id": "' + mid.encode() + b'", "seq_id": 1,',
        content_type="application/json",
    )
    assert r.status_code == 400, r.content
    audit, failed = records(alice.tenant, mid, "sessions:ForwardBackward")
    assert audit == [] and failed == []  # nothing readable named its model or seq_id


def test_a_denied_step_is_recorded_once(alice, bob, runtime) -> None:
    mid = create_model(bob, runtime, open_session(bob))
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-forward",
        {"document": DENY_FORWARD},
        format="json",
    )
    assert r.status_code == 200, r.content
    r = bob.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])]))
    assert r.status_code == 403, r.content
    audit, failed = records(bob.tenant, mid, "sessions:ForwardBackward")
    assert audit == [False]
    assert len(failed) == 1 and failed[0][0] == 1


def test_a_step_behind_the_model_is_recorded_once(alice, runtime) -> None:
    mid = create_model(alice, runtime, open_session(alice))
    assert alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])])).status_code == 200
    runtime.drain()
    r = alice.post("forward_backward", fwdbwd(mid, 1, [datum([3])]))
    assert r.status_code == 409, r.content
    audit, failed = records(alice.tenant, mid, "sessions:ForwardBackward")
    assert audit == [True, True] and failed == []  # its seq_id was the first request's


def test_a_denied_sample_is_recorded_once(alice, bob, charlie, runtime) -> None:
    sid = open_session(bob)
    opened = bob.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert opened.status_code == 200, opened.content
    sampler = opened.json()["sampling_session_id"]
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-sample",
        {"document": DENY_SAMPLE},
        format="json",
    )
    assert r.status_code == 200, r.content
    body = {
        "sampling_session_id": sampler,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
        "num_samples": 1,
        "sampling_params": {"max_tokens": 2},
    }
    assert bob.post("asample", body).status_code == 403
    audit = AuditEvent.objects.filter(tenant=bob.tenant, action="sessions:Sample")
    assert list(audit.values_list("allowed", flat=True)) == [False]
    assert not Operation.objects.filter(session_id=sid, kind=Operation.Kind.SAMPLE).exists()
    assert charlie.post("asample", body).status_code == 404  # another tenant's sampler
    assert audit.count() == 1
