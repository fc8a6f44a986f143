"""An allowed change's audit row says what became of it: succeeded, or failed with the error
(from an error answer, or a submit whose transaction rolled back); reads and refusals have no
outcome. The API's audit/events shows both fields; charlie never sees acme's."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from tests.support.wire import create_model, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db(transaction=True)


def _outcomes(tenant, action: str) -> list[tuple[bool, str, str]]:
    rows = AuditEvent.objects.filter(tenant=tenant, action=action).order_by("id")
    return list(rows.values_list("allowed", "outcome", "error"))


def test_an_allowed_change_that_the_service_refused_is_failed(alice, charlie) -> None:
    refused = alice.post("iam/api-keys", {"name": "ci", "role_arn": alice.role_arn})
    assert refused.status_code == 400
    made = alice.post("iam/api-keys", {"name": "laptop"})
    assert made.status_code == 201
    (ok1, out1, err1), (ok2, out2, err2) = _outcomes(alice.tenant, "iam:CreateApiKey")
    assert (ok1, out1) == (True, "failed") and "trust policy" in err1
    assert (ok2, out2, err2) == (True, "succeeded", "")
    listed = alice.get("audit/events", {"action": "iam:CreateApiKey"}).json()["events"]
    assert [(e["outcome"], bool(e["error"])) for e in listed] == [
        ("succeeded", False),
        ("failed", True),
    ]
    # a read has no outcome; charlie sees none of it
    reads = alice.get("audit/events", {"action": "audit:LookupEvents"}).json()["events"]
    assert reads and all(e["outcome"] is None for e in reads)
    assert charlie.get("audit/events", {"action": "iam:CreateApiKey"}).json()["events"] == []


def test_submits_in_one_transaction_succeed_or_fail_with_it(alice, runtime) -> None:
    model_id = create_model(alice, runtime, open_session(alice))
    assert alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2])])).status_code == 200
    refused = alice.post("forward_backward", fwdbwd(model_id, 0, [datum([1, 2])]))
    assert refused.status_code == 400
    rows = _outcomes(alice.tenant, "sessions:ForwardBackward")
    assert [(allowed, outcome) for allowed, outcome, _ in rows] == [
        (True, "succeeded"),
        (True, "failed"),
    ]
    assert "seq_id" in rows[1][2]


def test_a_denied_request_has_no_outcome(alice, bob) -> None:
    r = bob.post("iam/roles", {"name": "Nope", "policies": {}})
    assert r.status_code == 403
    assert _outcomes(alice.tenant, "iam:CreateRole") == [(False, "", "")]


def test_api_reads_are_audited_whatever_headers_they_send(alice, charlie) -> None:
    """Only a dashboard page's automatic refresh leaves its allowed read off the record; an API
    call that sends the dashboard's ``X-Fragment`` header is recorded like any other."""
    reads = AuditEvent.objects.filter(tenant=alice.tenant, action="audit:LookupEvents")
    for _ in range(2):
        assert alice.get("audit/events", HTTP_X_FRAGMENT="1").status_code == 200
    assert reads.filter(allowed=True).count() == 2
    assert charlie.get("audit/events", HTTP_X_FRAGMENT="1").status_code == 200
    assert reads.count() == 2  # charlie's read is on his tenant's record, not acme's
    assert (
        AuditEvent.objects.filter(tenant=charlie.tenant, action="audit:LookupEvents").count() == 1
    )
