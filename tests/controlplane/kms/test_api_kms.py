"""KMS keys over the API: lifecycle, naming a key three ways, validation, tenant isolation, purge."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.utils import timezone

from controlplane.housekeeping.janitor import sweep
from controlplane.kms.models import KmsKey, KmsKeyVersion

pytestmark = pytest.mark.django_db

FIELDS = {
    "key_id",
    "arn",
    "alias",
    "description",
    "provider",
    "aws_key_id",
    "state",
    "current_version",
    "deletion_date",
    "is_default",
    "created_at",
    "updated_at",
    "rotated_at",
}


def create(person, **body) -> dict:
    r = person.post("kms/keys", body)
    assert r.status_code == 201, r.content
    return r.json()


def names(key: dict) -> list[str]:
    """The three ways to name a key in a URL: its id, its ARN (URL-encoded) and its alias."""
    return [key["key_id"], quote(key["arn"], safe=""), key["alias"]]


def act(person, key: str, action: str, body: dict | None = None):
    return person.post(f"kms/keys/{key}/{action}", body)


def test_create_list_describe_for_the_tenant(alice, bob) -> None:
    key = create(alice, description="checkpoints of project x", alias="alias/project-x/ckpt")
    assert set(key) == FIELDS  # never any material
    assert key["state"] == "Enabled" and key["provider"] == "local"
    assert key["current_version"] == 1 and key["is_default"] is False
    account = alice.tenant.account_id
    assert key["arn"] == f"arn:loopwright:kms::{account}:key/{key['key_id']}"
    for name in names(key):
        assert alice.get(f"kms/keys/{name}").json() == key
        assert bob.get(f"kms/keys/{name}").json() == key  # bob shares the tenant
    # bob, a member, uses keys but does not administer them
    r = bob.post("kms/keys", {})
    assert r.status_code == 403 and "kms:CreateKey" in r.json()["detail"]
    assert act(bob, key["key_id"], "disable").status_code == 403
    other = create(alice)
    assert other["alias"] is None and other["description"] == ""
    listed = alice.get("kms/keys").json()["keys"]
    assert [k["key_id"] for k in listed] == [key["key_id"], other["key_id"]]
    assert bob.get("kms/keys").json()["keys"] == listed


def test_state_transitions(alice) -> None:
    key = create(alice, alias="alias/states")
    ref = key["key_id"]
    assert act(alice, ref, "disable").json()["state"] == "Disabled"
    assert act(alice, ref, "disable").json()["state"] == "Disabled"  # idempotent
    assert act(alice, ref, "enable").json()["state"] == "Enabled"

    before = timezone.now()
    pending = act(alice, ref, "schedule-deletion", {"pending_window_days": 7}).json()
    assert pending["state"] == "PendingDeletion"
    date = timezone.datetime.fromisoformat(pending["deletion_date"])
    assert timedelta(days=7) <= date - before < timedelta(days=7, minutes=1)
    for action in ("enable", "disable", "rotate", "schedule-deletion"):
        r = act(alice, ref, action)
        assert r.status_code == 409, action
        assert "PendingDeletion" in r.json()["detail"] or "pending" in r.json()["detail"]

    cancelled = act(alice, ref, "cancel-deletion").json()
    assert cancelled["state"] == "Disabled" and cancelled["deletion_date"] is None
    r = act(alice, ref, "cancel-deletion")
    assert r.status_code == 409 and "not pending deletion" in r.json()["detail"]
    assert act(alice, ref, "enable").json()["state"] == "Enabled"

    default_window = act(alice, ref, "schedule-deletion").json()
    date = timezone.datetime.fromisoformat(default_window["deletion_date"])
    assert date - before >= timedelta(days=30)


def test_rotation(alice) -> None:
    key = create(alice)
    rotated = act(alice, quote(key["arn"], safe=""), "rotate").json()
    assert rotated["current_version"] == 2 and rotated["rotated_at"] is not None
    assert act(alice, key["key_id"], "rotate").json()["current_version"] == 3
    versions = KmsKeyVersion.objects.filter(key_id=key["key_id"]).order_by("version")
    assert [v.version for v in versions] == [1, 2, 3]
    assert len({bytes(v.material) for v in versions}) == 3
    act(alice, key["key_id"], "disable")
    r = act(alice, key["key_id"], "rotate")
    assert r.status_code == 409 and "Disabled" in r.json()["detail"]


def test_another_tenant_sees_nothing(alice, charlie) -> None:
    key = create(alice, alias="alias/mine")
    for name in names(key):
        r = charlie.get(f"kms/keys/{name}")
        assert r.status_code == 404, name
        assert r.json()["code"] == "not_found"
        for action in ("disable", "enable", "schedule-deletion", "cancel-deletion", "rotate"):
            assert act(charlie, name, action).status_code == 404, (name, action)
    assert charlie.get("kms/keys").json()["keys"] == []
    # charlie may use the same alias in his own tenant
    assert create(charlie, alias="alias/mine")["arn"] != key["arn"]
    assert KmsKey.objects.get(id=key["key_id"]).state == "Enabled"


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"description": "x" * 8193}, "description", "8192"),
        ({"description": 5}, "description", "string"),
        ({"alias": "checkpoints"}, "alias", "alias/[A-Za-z0-9/_-]{1,250}"),
        ({"alias": "alias/"}, "alias", "alias/[A-Za-z0-9/_-]{1,250}"),
        ({"alias": "alias/with space"}, "alias", "alias/[A-Za-z0-9/_-]{1,250}"),
        ({"alias": "alias/" + "a" * 251}, "alias", "at most 256 characters"),
        ({"alias": "alias/aws/s3"}, "alias", "reserved"),
        ({"alias": 3}, "alias", "string"),
        ({"provider": "gcp"}, "provider", "'local' or 'aws'"),
        ({"aws_key_id": "1234"}, "aws_key_id", "provider aws"),
        ({"key_material": "AAAA"}, "key_material", "unknown field"),
    ],
)
def test_create_validation(alice, body: dict, field: str, says: str) -> None:
    r = alice.post("kms/keys", body)
    assert r.status_code == 400, r.content
    out = r.json()
    assert out["field"] == field and says in out["detail"], out
    assert not KmsKey.objects.exists()


@pytest.mark.parametrize("days", [6, 31, 0, -1, "7", True, 7.5, None])
def test_deletion_window_validation(alice, days) -> None:
    key = create(alice)
    r = act(alice, key["key_id"], "schedule-deletion", {"pending_window_days": days})
    assert r.status_code == 400
    out = r.json()
    assert out["field"] == "pending_window_days" and "pending_window_days" in out["detail"]
    assert KmsKey.objects.get(id=key["key_id"]).state == "Enabled"


def test_other_refusals(alice) -> None:
    create(alice, alias="alias/taken")
    r = alice.post("kms/keys", {"alias": "alias/taken"})
    assert r.status_code == 409 and r.json()["field"] == "alias"
    key = create(alice)
    r = act(alice, key["key_id"], "disable", {"force": True})
    assert r.status_code == 400 and r.json()["field"] == "force"
    for name in (
        "arn:loopwright:kms::123:key/nope",
        quote("arn:loopwright:kms::123456789012:key/" + key["key_id"], safe=""),
        "not-a-uuid",
        "alias/none",
    ):
        r = alice.get(f"kms/keys/{name}")
        assert r.status_code == 404 and r.json()["field"] == "key_id", name
    assert alice.client.delete(f"/api/v1/kms/keys/{key['key_id']}").status_code == 405


def test_keys_past_their_deletion_date_are_purged(alice) -> None:
    doomed, kept = create(alice, alias="alias/doomed"), create(alice)
    act(alice, doomed["key_id"], "schedule-deletion", {"pending_window_days": 7})
    act(alice, kept["key_id"], "schedule-deletion", {"pending_window_days": 7})
    assert sweep()["deleted_keys"] == []
    KmsKey.objects.filter(id=doomed["key_id"]).update(
        deletion_date=timezone.now() - timedelta(seconds=1)
    )
    assert sweep()["deleted_keys"] == [doomed["arn"]]
    assert alice.get(f"kms/keys/{doomed['key_id']}").status_code == 404
    assert not KmsKeyVersion.objects.filter(key_id=doomed["key_id"]).exists()
    assert alice.get(f"kms/keys/{kept['key_id']}").json()["state"] == "PendingDeletion"

    KmsKey.objects.filter(id=kept["key_id"]).update(deletion_date=timezone.now())
    out = StringIO()
    call_command("kms_purge", stdout=out)
    assert out.getvalue().strip() == f"deleted {kept['arn']}"
    assert not KmsKey.objects.exists()
