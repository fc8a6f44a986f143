"""The dashboard's member pages keep the rule of who may grant which membership, as the API does
(docs/security.md, "Who may grant a membership"): an admin never makes an owner nor changes or
removes one, and is told why; the owner may."""

from __future__ import annotations

import html

from controlplane.tenants.models import Membership
from tests.support.pages import member

Role = Membership.Role


def _role(email: str) -> str:
    return Membership.objects.get(user__username=email).role


def _said(client, response) -> str:
    return html.unescape(client.get(response["Location"]).content.decode())


def test_an_admin_is_refused_owners_and_told_why(alice, bob, charlie) -> None:
    erin = member("erin", alice, Role.ADMIN)
    r = erin.post("/iam/users/erin@example.com/membership", {"role": "owner"})
    assert r.status_code == 302 and "nobody raises their own membership" in _said(erin, r)
    r = erin.post("/iam/users/alice@example.com/membership", {"role": "member"})
    assert "may not change the membership of an owner" in _said(erin, r)
    r = erin.post("/iam/users/alice@example.com/remove")
    assert "may not remove the membership of an owner" in _said(erin, r)
    r = erin.post("/iam/users/invite", {"email": "mallory@example.com", "role": "owner"})
    assert r.status_code == 403
    assert "may grant member, billing_viewer, not owner" in html.unescape(r.content.decode())
    assert (_role("alice@example.com"), _role("erin@example.com")) == ("owner", "admin")
    r = erin.post("/iam/users/bob@example.com/membership", {"role": "billing_viewer"})
    assert r.status_code == 302 and _role("bob@example.com") == "billing_viewer"
    assert charlie.post("/iam/users/bob@example.com/remove").status_code == 404


def test_the_owner_makes_another_owner_who_may_then_step_down(alice, bob) -> None:
    r = alice.post("/iam/users/bob@example.com/membership", {"role": "owner"})
    assert r.status_code == 302 and _role("bob@example.com") == "owner"
    r = bob.post("/iam/users/alice@example.com/membership", {"role": "admin"})
    assert _role("alice@example.com") == "admin"
    r = bob.post("/iam/users/bob@example.com/membership", {"role": "member"})
    assert "keeps at least one owner" in _said(bob, r)
    assert _role("bob@example.com") == "owner"
