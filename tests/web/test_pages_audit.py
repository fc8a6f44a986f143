"""The audit log page: newest first, filtered by action, principal, decision, dates and resource,
paged; charlie sees none of acme's events and bob (a member) may not read the log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.audit.services import audit_record

pytestmark = pytest.mark.django_db


def event(tenant, action: str, resource: str, *, allowed: bool = True, at: datetime | None = None,
          principal: str = "arn:loopwright:iam::000000000000:user/robot") -> AuditEvent:  # fmt: skip
    made = audit_record(
        tenant=tenant,
        principal=principal,
        action=action,
        resource=resource,
        allowed=allowed,
        effect="Allow" if allowed else "ImplicitDeny",
        mutating=not action.split(":")[1].startswith(("Get", "List", "Describe")),
        reason="allowed by a test" if allowed else f"no policy allows {action} on {resource}",
        source_ip="10.1.2.3",
    )
    if at is not None:
        AuditEvent.objects.filter(pk=made.pk).update(at=at)
    return made


@pytest.fixture
def events(alice) -> list[AuditEvent]:
    t = alice.tenant
    return [
        event(t, "kms:DisableKey", "arn:loopwright:kms::1:key/abc", at=datetime(2025, 3, 1, tzinfo=UTC)),
        event(t, "iam:CreateRole", "arn:loopwright:iam::1:role/Deployer", allowed=False,
              at=datetime(2025, 3, 5, tzinfo=UTC)),
        event(t, "registry:DescribeModelPackage", "arn:loopwright:registry::1:model-package/my-rl/2",
              at=datetime(2025, 3, 9, 23, 59, tzinfo=UTC), principal="system:operator"),
    ]  # fmt: skip


def test_logged_out_goes_to_login(client) -> None:
    r = client.get("/audit")
    assert r.status_code == 302 and r["Location"].startswith("/login?next=/audit")


def test_newest_first_with_decisions(alice, events) -> None:
    page = alice.get("/audit", {"reads": "on"}).content.decode()
    assert "audit:LookupEvents" in page  # looking at the log is itself recorded
    kms, iam, registry = (page.index(e.resource) for e in events)
    assert registry < iam < kms
    assert "denied" in page and "no policy allows iam:CreateRole" in page and "10.1.2.3" in page


def test_filters(alice, events) -> None:
    def shown(**params) -> set[str]:
        page = alice.get("/audit", {"reads": "on", **params}).content.decode()
        return {e.action for e in events if e.resource in page}

    assert shown(action="kms:disablekey") == {"kms:DisableKey"}
    assert shown(action="describemodel") == {"registry:DescribeModelPackage"}  # any part of it
    assert shown(decision="deny") == {"iam:CreateRole"}
    assert shown(principal="system:operator") == {"registry:DescribeModelPackage"}
    assert shown(resource="ROLE/deploy") == {"iam:CreateRole"}
    assert shown(since="2025-03-05", until="2025-03-09") == {"iam:CreateRole", "registry:DescribeModelPackage"}  # fmt: skip
    assert shown(until="2025-03-04") == {"kms:DisableKey"}
    page = alice.get("/audit", {"action": "kms:Nothing"}).content.decode()
    assert "No event matches these filters" in page


def test_filter_errors_are_shown_in_place(alice, events) -> None:
    r = alice.get("/audit", {"since": "2025-03-09", "until": "2025-03-01"})
    body = r.content.decode()
    assert r.status_code == 400 and "must not be before From" in body
    assert 'id="id_until_error"' in body
    r = alice.get("/audit", {"since": "yesterday"})
    assert r.status_code == 400 and "Enter a valid date" in r.content.decode()


def test_pages_of_fifty(alice) -> None:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for i in range(60):
        event(alice.tenant, "kms:ListKeys", f"res-{i:03d}", at=start + timedelta(minutes=i))
    first = alice.get("/audit", {"action": "kms:ListKeys", "reads": "on"})
    page = first.content.decode()
    assert "res-059" in page and "res-010" in page and "res-009" not in page
    older = first.context["older"]
    assert older.startswith("?action=kms%3AListKeys&reads=on&before=")
    page = alice.get(f"/audit{older}").content.decode()
    assert "res-009" in page and "res-000" in page and "res-010" not in page
    assert "Older events" not in page and "Newest" in page


def test_charlie_sees_none_of_acmes_events(alice, charlie, events) -> None:
    page = charlie.get("/audit").content.decode()
    assert not any(e.resource in page for e in events)
    page = charlie.get("/audit", {"action": "iam:CreateRole"}).content.decode()
    assert "Deployer" not in page
    assert "alice@" not in page


def test_bob_may_not_read_the_log(bob, events) -> None:
    r = bob.get("/audit")
    assert r.status_code == 403 and "audit:LookupEvents" in r.content.decode()


def test_changes_only_by_default_and_reads_on_request(alice, events) -> None:
    def listed(**params) -> set[str]:
        return {e.action for e, _, _ in alice.get("/audit", params).context["events"]}

    assert listed() == {"kms:DisableKey", "iam:CreateRole"}
    assert "Only changes are listed" in alice.get("/audit").content.decode()
    assert {"registry:DescribeModelPackage", "audit:LookupEvents"} <= listed(reads="on")
    assert "Reads are included" in alice.get("/audit", {"reads": "on"}).content.decode()


def test_an_allowed_change_that_failed_says_so(alice, bob, charlie) -> None:
    # a key for the session role: allowed by alice's policy, refused by the role's trust policy
    made = alice.post("/iam/keys", {"name": "ci", "owner": "role:LoopwrightSessionRole"})
    assert made.status_code == 400
    alice.post("/iam/keys", {"name": "laptop", "owner": "me"})
    rows = AuditEvent.objects.filter(tenant=alice.tenant, action="iam:CreateApiKey").order_by("id")
    assert [(r.allowed, r.outcome) for r in rows] == [(True, "failed"), (True, "succeeded")]
    assert "trust policy" in rows[0].error
    page = alice.get("/audit", {"action": "apikey"}).content.decode()
    assert "Outcome" in page and ">failed<" in page and ">succeeded<" in page
    assert "trust policy" in page
    failed = alice.get("/audit", {"action": "apikey", "outcome": "failed"})
    assert [e.outcome for e, _, _ in failed.context["events"]] == ["failed"]
    # a refused request has a decision, not an outcome
    bob.post("/iam/roles", {"name": "Nope", "trust_policy": "{}"})
    denied = AuditEvent.objects.get(tenant=alice.tenant, action="iam:CreateRole")
    assert not denied.allowed and denied.outcome == ""
    assert "not done" in alice.get("/audit", {"action": "CreateRole"}).content.decode()
    theirs = charlie.get("/audit", {"action": "apikey", "reads": "on"}).context["events"]
    assert all(e.tenant_id == charlie.tenant.id for e, _, _ in theirs)
    assert not any(e.action == "iam:CreateApiKey" for e, _, _ in theirs)
