"""The KMS pages: keys with their state, alias, rotation and versions; create, disable, enable,
rotate, schedule and cancel deletion, refusals shown on the key's page; charlie gets 404s, bob
(a member) may look but not change."""

from __future__ import annotations

import pytest

from controlplane.kms import services
from controlplane.kms.models import KmsKey

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(alice) -> KmsKey:
    return services.key_create(
        tenant=alice.tenant, actor="test", description="checkpoints of evals", alias="alias/evals"
    )


def test_logged_out_goes_to_login(client, key) -> None:
    for url in ("/kms", f"/kms/keys/{key.id}"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/login?next=/kms")


def test_keys_list_and_detail(alice, key) -> None:
    page = alice.get("/kms").content.decode()
    assert str(key.id) in page and "alias/evals" in page and "Enabled" in page
    page = alice.get(f"/kms/keys/{key.id}").content.decode()
    assert key.arn in page and "checkpoints of evals" in page and "Rotate now" in page
    assert "current" in page  # version 1


def test_empty_list_says_what_to_do(alice) -> None:
    assert "No keys yet" in alice.get("/kms").content.decode()


def test_create_validates_in_place(alice) -> None:
    r = alice.post("/kms", {"alias": "evals", "provider": "local", "description": ""})
    body = r.content.decode()
    assert r.status_code == 400 and "must match" in body and 'id="id_alias_error"' in body
    r = alice.post("/kms", {"alias": "alias/evals", "provider": "local", "description": "x"})
    made = KmsKey.objects.get(tenant=alice.tenant, alias="alias/evals")
    assert r.status_code == 302 and r["Location"] == f"/kms/keys/{made.id}"
    assert made.state == "Enabled" and made.current_version == 1
    r = alice.post("/kms", {"alias": "alias/evals", "provider": "local"})
    assert r.status_code == 400 and "already names another key" in r.content.decode()
    r = alice.post("/kms", {"provider": "local", "aws_key_id": "abc"})
    assert r.status_code == 400 and "only keys with provider aws" in r.content.decode()


def test_state_changes_and_rotation(alice, key) -> None:
    base = f"/kms/keys/{key.id}"
    assert alice.post(f"{base}/rotate")["Location"] == base
    key.refresh_from_db()
    assert key.current_version == 2 and key.rotated_at is not None
    page = alice.get(base).content.decode()
    assert page.count("opens what it sealed") == 1  # version 1 still opens old checkpoints
    assert alice.post(f"{base}/disable").status_code == 302
    key.refresh_from_db()
    assert key.state == "Disabled"
    r = alice.post(f"{base}/rotate")  # only an Enabled key rotates: refused in place
    assert r.status_code == 409 and "only an Enabled key rotates" in r.content.decode()
    assert 'class="problem" role="alert"' in r.content.decode()
    assert alice.post(f"{base}/enable").status_code == 302
    r = alice.post(f"{base}/schedule-deletion", {"pending_window_days": "3"})
    body = r.content.decode()
    assert r.status_code == 400 and "an integer from 7 to 30" in body
    assert 'id="id_pending_window_days_error"' in body
    r = alice.post(f"{base}/schedule-deletion", {"pending_window_days": "7"})
    assert r.status_code == 302
    key.refresh_from_db()
    assert key.state == "PendingDeletion" and key.deletion_date is not None
    page = alice.get(base).content.decode()
    assert "Cancel deletion" in page and "deleted on" in page
    r = alice.post(f"{base}/disable")
    assert r.status_code == 409 and "cancel the deletion" in r.content.decode()
    assert alice.post(f"{base}/cancel-deletion").status_code == 302
    key.refresh_from_db()
    assert key.state == "Disabled" and key.deletion_date is None


def test_charlie_sees_nothing_of_acme(alice, charlie, key) -> None:
    assert str(key.id) not in charlie.get("/kms").content.decode()
    assert charlie.get(f"/kms/keys/{key.id}").status_code == 404
    assert charlie.get("/kms/keys/alias/evals").status_code == 404
    for change in ("disable", "enable", "rotate", "schedule-deletion", "cancel-deletion"):
        r = charlie.post(f"/kms/keys/{key.id}/{change}", {"pending_window_days": "7"})
        assert r.status_code == 404, change
    key.refresh_from_db()
    assert key.state == "Enabled" and key.current_version == 1


def test_bob_may_look_but_not_change(bob, key) -> None:
    assert bob.get("/kms").status_code == 200
    assert bob.get(f"/kms/keys/{key.id}").status_code == 200
    r = bob.post("/kms", {"provider": "local"})
    assert r.status_code == 403 and "kms:CreateKey" in r.content.decode()
    for change in ("disable", "rotate", "schedule-deletion"):
        r = bob.post(f"/kms/keys/{key.id}/{change}", {"pending_window_days": "7"})
        assert r.status_code == 403, change
    key.refresh_from_db()
    assert key.state == "Enabled" and key.current_version == 1
