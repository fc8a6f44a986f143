"""Role-aware pages: what a principal may not do is left out or disabled with the reason, the
navigation offers only the sections they may open, and a refusal reads as words (the policy's own
reason stays one click away). alice owns acme, bob is a member, vera a billing viewer; charlie
(another account) gets 404 for acme's things."""

from __future__ import annotations

import re

import pytest

from controlplane.tenants.models import Membership
from controlplane.tenants.services import membership_add, user_create
from tests.people import PASSWORD
from tests.support.pages import logged_in

from .test_pages_registry import seed_versions
from .test_pages_sessions import new_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def vera(alice):
    user = user_create(email="vera@example.com", password=PASSWORD)
    membership = membership_add(tenant=alice.tenant, user=user, role=Membership.Role.BILLING_VIEWER)
    return logged_in(membership, role_arn=alice.role_arn, api_key="")


def nav(client) -> list[str]:
    html = client.get("/overview").content.decode()
    menu = html.split('<nav aria-label="Main">', 1)[1].split("</nav>", 1)[0]
    return re.findall(r">(\w+)</a>", menu)


def test_the_navigation_offers_what_each_may_open(alice, bob, vera):
    assert nav(alice) == ["Overview", "Sessions", "Registry", "IAM", "KMS", "VPC", "Billing", "Audit"]  # fmt: skip
    assert nav(bob) == ["Overview", "Sessions", "Registry", "IAM", "KMS"]
    assert nav(vera) == ["Overview", "Sessions", "Registry", "Billing"]


def test_a_billing_viewer_sees_what_they_cannot_do_and_why(alice, charlie, vera, worker, tmp_path):
    session, _ = new_session(alice)
    overview = vera.get("/overview").content.decode()
    assert '<button type="button" disabled>New session</button>' in overview
    assert "your permissions do not include <code>sessions:CreateTrainingSession</code>" in overview
    page = vera.get(f"/sessions/{session.id}").content.decode()
    assert "You may not stop it (sessions:StopTrainingSession)" in page
    assert f'action="/sessions/{session.id}/stop"' not in page
    seed_versions(alice, "my-rl", 2, tmp_path)
    group = vera.get("/registry/groups/my-rl").content.decode()
    assert "read only for you" in group and ">Approve<" not in group and "/download" not in group
    version = vera.get("/registry/groups/my-rl/versions/1").content.decode()
    assert "registry:UpdateModelPackageApproval" in version and "Save decision" not in version
    assert "registry:DownloadModelPackage" in version
    registry = vera.get("/registry").content.decode()
    assert "Create group" not in registry and "registry:CreateModelPackageGroup" in registry
    # the owner sees every action
    owner = alice.get("/registry/groups/my-rl").content.decode()
    assert ">Approve<" in owner and "/download?format=adapter" in owner
    assert charlie.get("/registry/groups/my-rl").status_code == 404
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


def test_a_refusal_reads_as_words_not_a_policy_dump(vera):
    r = vera.get("/iam/roles")
    body = r.content.decode()
    assert r.status_code == 403
    assert "do not let you do this" in body and "list the account&#x27;s roles" in body.lower()
    assert "You are a billing viewer of this account" in body
    assert 'href="/iam/users"' not in body  # a page they could not open either
    assert "<details><summary>Why, exactly</summary>" in body  # the evaluator's reason, folded
    assert body.index("do not let you do this") < body.index("is not authorized to perform")


def test_a_member_reads_roles_but_is_offered_no_change(alice, bob):
    roles = bob.get("/iam/roles").content.decode()
    assert "Create role" not in roles and "iam:CreateRole" in roles
    role = bob.get("/iam/roles/LoopwrightSessionRole").content.decode()
    assert "Delete role" not in role and "Add inline policy" not in role
    assert "iam:UpdateAssumeRolePolicy" in role and "Edit trust policy" not in role
    members = bob.get("/iam/users").content.decode()
    assert 'href="/iam/users/alice@example.com"' not in members  # he may not open a member
    assert "Create invitation" not in members
    keys = bob.get("/iam/keys").content.decode()
    assert "Create key" in keys  # his own keys he may make
    owner = alice.get("/iam/roles/LoopwrightSessionRole").content.decode()
    assert "Delete role" in owner and "Edit trust policy" in owner


def test_a_key_for_the_session_role_from_the_ui_with_the_members_template(alice, charlie):
    keys = alice.get("/iam/keys").content.decode()
    assert "LoopwrightSessionRole (does not trust you)" in keys
    link = "/iam/roles/LoopwrightSessionRole/trust-policy?template=members"
    assert link in keys
    editor = alice.get(link).content.decode()
    assert "MembersOfThisAccount" in editor and alice.tenant.account_id in editor
    assert "Nothing is saved until you press Save" in editor
    doc = re.search(r"<textarea[^>]*>(.*?)</textarea>", editor, re.S).group(1)
    import html as htmllib

    saved = alice.post(
        "/iam/roles/LoopwrightSessionRole/trust-policy", {"trust_policy": htmllib.unescape(doc)}
    )
    assert saved.status_code == 302
    made = alice.post("/iam/keys", {"name": "ci", "owner": "role:LoopwrightSessionRole"})
    assert made.status_code == 302
    shown = alice.get(made["Location"]).content.decode()
    assert '<code id="raw-key">tml-' in shown
    assert "does not trust you" not in shown
    assert charlie.get("/iam/roles/LoopwrightSessionRole/trust-policy").status_code == 404 or (
        alice.tenant.account_id not in charlie.get(link).content.decode()
    )
