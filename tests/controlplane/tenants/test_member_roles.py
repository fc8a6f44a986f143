"""Who may grant which membership role through the API (docs/security.md, "Who may grant a
membership"): owners grant anything; an admin grants and changes only members and billing
viewers; nobody raises their own membership; the last owner stays; an invitation is worth what
its sender may still grant. Charlie sees none of it."""

from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.iam import services as iam_services
from controlplane.tenants.models import Membership
from tests.support.callers import Person, api_client, member

Role = Membership.Role


def _role_of(person: Person, email: str) -> str:
    return Membership.objects.get(tenant=person.tenant, user__username=email).role


def _patch(person: Person, email: str, role: str):
    return person.client.patch(f"/api/v1/iam/users/{email}", {"role": role}, format="json")


def test_an_admin_never_makes_an_owner_nor_touches_one(alice: Person, bob: Person) -> None:
    erin = member("erin", alice, Role.ADMIN)
    r = _patch(erin, "erin@example.com", "owner")  # promote itself
    assert r.status_code == 403 and r.json()["field"] == "role"
    assert "nobody raises their own membership" in r.json()["detail"]
    r = _patch(erin, "alice@example.com", "admin")  # demote the owner
    assert r.status_code == 403 and "only an owner may" in r.json()["detail"]
    assert erin.client.delete("/api/v1/iam/users/alice@example.com").status_code == 403
    r = _patch(erin, "bob@example.com", "owner")
    assert (
        r.status_code == 403
        and "may grant member, billing_viewer, not owner" in (r.json()["detail"])
    )
    r = erin.post("iam/users", {"email": "mallory@example.com", "role": "owner"})
    assert r.status_code == 403 and r.json()["field"] == "role"
    assert erin.post("iam/users", {"email": "ada@example.com", "role": "admin"}).status_code == 403
    assert _role_of(alice, "alice@example.com") == "owner"
    assert _role_of(alice, "erin@example.com") == "admin"


def test_an_admin_manages_members_and_billing_viewers_only(alice: Person, bob: Person) -> None:
    erin = member("erin", alice, Role.ADMIN)
    member("frank", alice, Role.ADMIN)
    assert _patch(erin, "bob@example.com", "billing_viewer").status_code == 200
    assert _patch(erin, "bob@example.com", "admin").status_code == 403
    assert _patch(erin, "frank@example.com", "member").status_code == 403  # a peer: owners only
    assert erin.client.delete("/api/v1/iam/users/frank@example.com").status_code == 403
    r = erin.post("iam/users", {"email": "ada@example.com", "role": "member"})
    assert r.status_code == 201
    assert erin.client.delete("/api/v1/iam/users/bob@example.com").status_code == 204
    assert _patch(erin, "erin@example.com", "member").status_code == 200  # steps down
    assert _role_of(alice, "erin@example.com") == "member"


def test_owners_grant_anything_and_the_last_owner_stays(alice: Person, bob: Person) -> None:
    assert _patch(alice, "bob@example.com", "owner").status_code == 200
    bob_owner = bob
    assert _patch(bob_owner, "alice@example.com", "admin").status_code == 200  # owners: any
    assert _patch(alice, "alice@example.com", "owner").status_code == 403  # not back up alone
    r = _patch(bob_owner, "bob@example.com", "member")
    assert r.status_code == 409 and "keeps at least one owner" in r.json()["detail"]
    r = bob_owner.client.delete("/api/v1/iam/users/bob@example.com")
    assert r.status_code == 409
    assert _role_of(alice, "bob@example.com") == "owner"


def test_a_member_given_iam_rights_still_cannot_raise_anyone(alice: Person, bob: Person) -> None:
    member("vera", alice, Role.BILLING_VIEWER)
    everything = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "iam:*", "Resource": "*"}],
    }
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/iam", {"document": everything}, format="json"
    )
    assert r.status_code == 200
    r = _patch(bob, "bob@example.com", "billing_viewer")  # sideways: other rights
    assert r.status_code == 403 and "sideways" in r.json()["detail"]
    assert _patch(bob, "vera@example.com", "member").status_code == 403  # a peer
    r = bob.post("iam/users", {"email": "ada@example.com", "role": "member"})
    assert r.status_code == 403 and "may grant no role" in r.json()["detail"]


def test_an_iam_role_ranks_as_an_admin(alice: Person, bob: Person, charlie: Person) -> None:
    role = iam_services.role_create(
        tenant=alice.tenant,
        actor="test",
        name="people-ops",
        trust_policy=iam_services.trust_for_members(alice.tenant.account_id),
        policies={
            "iam": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "iam:*", "Resource": "*"}],
            }
        },
    )
    _, raw = iam_services.api_key_create(tenant=alice.tenant, role=role, name="ops")
    ops = Person("ops", api_client(raw), alice.tenant, alice.role_arn, raw)
    assert _patch(ops, "bob@example.com", "billing_viewer").status_code == 200
    assert _patch(ops, "bob@example.com", "admin").status_code == 403
    assert _patch(ops, "alice@example.com", "member").status_code == 403
    assert ops.post("iam/users", {"email": "x@example.com", "role": "owner"}).status_code == 403
    assert _patch(charlie, "bob@example.com", "member").status_code == 404
    assert charlie.client.delete("/api/v1/iam/users/bob@example.com").status_code == 404


def test_an_invitation_is_worth_what_its_sender_may_still_grant(alice: Person) -> None:
    olga = member("olga", alice, Role.OWNER)
    r = olga.post("iam/users", {"email": "pat@example.com", "role": "owner"})
    assert r.status_code == 201
    token = r.json()["token"]
    assert _patch(alice, "olga@example.com", "admin").status_code == 200
    r = APIClient().post(
        "/api/v1/auth/accept-invitation",
        {"token": token, "password": "pat's long passphrase"},
        format="json",
    )
    assert r.status_code == 409 and "may no longer grant owner" in r.json()["detail"]
    assert not Membership.objects.filter(user__username="pat@example.com").exists()
