"""A submit's audit row is written in the submit's own transaction (one disk flush for both);
when the request is refused, and its transaction rolls back, the audit row is still written."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audit_record, audited_transaction
from controlplane.training_sessions.models import Operation
from tests.support.wire import create_model, datum, fwdbwd, open_session

pytestmark = pytest.mark.django_db(transaction=True)


def _record(tenant, action: str) -> None:
    audit_record(
        tenant=tenant,
        principal="arn:test",
        action=action,
        resource="*",
        allowed=True,
        effect="Allow",
        mutating=True,
    )


def test_rows_survive_a_rollback_and_are_written_once_on_commit(alice) -> None:
    tenant = alice.tenant
    with audited_transaction():
        _record(tenant, "test:Committed")
    with pytest.raises(ValueError), audited_transaction():
        _record(tenant, "test:RolledBack")
        AuditEvent.objects.filter(action="test:Committed").delete()  # undone with the block
        raise ValueError("refused")
    assert AuditEvent.objects.filter(action="test:Committed").count() == 1
    assert AuditEvent.objects.filter(action="test:RolledBack").count() == 1


def _events(tenant, action: str) -> list[tuple[bool, str]]:
    rows = AuditEvent.objects.filter(tenant=tenant, action=action).order_by("id")
    return list(rows.values_list("allowed", "resource"))


def test_submits_refused_or_accepted_are_each_audited_once(alice, charlie, runtime) -> None:
    model_id = create_model(alice, runtime, open_session(alice))
    before = len(_events(alice.tenant, "sessions:ForwardBackward"))
    ok = alice.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2])]))
    assert ok.status_code == 200
    refused = alice.post("forward_backward", fwdbwd(model_id, 0, [datum([1, 2])]))
    assert refused.status_code == 400 and refused.json()["field"] == "seq_id"
    events = _events(alice.tenant, "sessions:ForwardBackward")[before:]
    assert len(events) == 2 and all(allowed for allowed, _ in events)
    assert Operation.objects.filter(model_id=model_id, kind="forward_backward").count() == 1
    # another tenant's attempt: 404 for the model, audited in charlie's account, not alice's
    other = charlie.post("forward_backward", fwdbwd(model_id, 2, [datum([1, 2])]))
    assert other.status_code == 404
    assert len(_events(alice.tenant, "sessions:ForwardBackward")[before:]) == 2
    assert len(_events(charlie.tenant, "sessions:ForwardBackward")) == 1
