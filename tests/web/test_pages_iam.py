"""The IAM pages: roles and their policies, members, the policy editor (checked by the API's
parser, errors in place), API keys (shown once, revoked) and the simulator; charlie gets 404s
for acme's things and bob, a plain member, 403s where his built-in policy says no."""

from __future__ import annotations

import json
import re

import pytest

from controlplane.iam.models import ApiKey, Role
from controlplane.iam.selectors import api_key_for
from controlplane.iam.services import DEFAULT_TRUST_POLICY, api_key_create, role_create
from tests.people import PASSWORD

pytestmark = pytest.mark.django_db

GOOD = {
    "Version": "2012-10-17",
    "Statement": [{"Sid": "Read", "Effect": "Allow", "Action": "registry:List*", "Resource": "*"}],
}
BAD = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "kms:ListKeys", "Resource": "*"},
                  {"Effect": "Allw", "Action": "kms:ListKeys", "Resource": "*"}],
}  # fmt: skip


def trusting(person, name: str = "Deployer") -> Role:
    """A role of ``person``'s tenant whose trust policy lets ``person`` assume it."""
    arn = f"arn:loopwright:iam::{person.tenant.account_id}:user/{person.user.username}"
    return role_create(
        tenant=person.tenant,
        actor=arn,
        name=name,
        description="ships models",
        trust_policy={
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Loopwright": arn}, "Action": "sts:AssumeRole"}],
        },
        policies={"ship": GOOD},
    )  # fmt: skip


def test_logged_out_goes_to_login(client) -> None:
    for url in ("/iam/roles", "/iam/users", "/iam/keys", "/iam/simulator", "/iam/roles/x"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/login?next=/iam"), url
    assert client.get("/iam").status_code == 302


def test_roles_list_detail_and_create(alice) -> None:
    page = alice.get("/iam/roles").content.decode()
    assert "LoopwrightSessionRole" in page and 'aria-current="page"' in page
    page = alice.get("/iam/roles/LoopwrightSessionRole").content.decode()
    assert "sessions.loopwright.dev" in page and "PassItself" in page  # trust and inline policy
    r = alice.post("/iam/roles", {"name": "bad name!", "trust_policy": "{}"})
    assert r.status_code == 400 and "a role name is 1 to 64" in r.content.decode()
    r = alice.post("/iam/roles", {"name": "Evaluator", "trust_policy": '{"Version": "2012-10-17"'})
    body = r.content.decode()
    assert r.status_code == 400 and "invalid JSON" in body
    assert 'id="id_trust_policy_error"' in body and 'aria-invalid="true"' in body
    r = alice.post(
        "/iam/roles",
        {"name": "Evaluator", "description": "runs evals", "trust_policy": json.dumps(GOOD)},
    )
    assert r.status_code == 400 and "Statement[0].Action" in r.content.decode()
    r = alice.post(
        "/iam/roles",
        {
            "name": "Evaluator",
            "description": "runs evals",
            "trust_policy": json.dumps(DEFAULT_TRUST_POLICY),
        },
    )
    assert r.status_code == 302 and r["Location"] == "/iam/roles/Evaluator"
    assert Role.objects.get(tenant=alice.tenant, name="Evaluator").description == "runs evals"
    r = alice.post("/iam/roles", {"name": "Evaluator", "trust_policy": "{}"})
    assert r.status_code == 400


def test_policy_editor_shows_errors_in_place_and_saves(alice) -> None:
    url = "/iam/roles/LoopwrightSessionRole/policies/new"
    assert "Statement" in alice.get(url).content.decode()  # a template to start from
    r = alice.post(url, {"policy_name": "readers", "document": json.dumps(BAD, indent=2)})
    body = r.content.decode()
    assert r.status_code == 400
    assert "Statement[1].Effect: must be &quot;Allow&quot; or &quot;Deny&quot;" in body
    assert re.search(r'<textarea[^>]*aria-invalid="true"', body)
    assert "Allw" in body  # what was typed stays in the editor
    r = alice.post(url, {"policy_name": "readers", "document": "not json"})
    assert r.status_code == 400 and "invalid JSON" in r.content.decode()
    r = alice.post(url, {"policy_name": "readers", "document": json.dumps(GOOD)})
    assert r.status_code == 302 and r["Location"] == "/iam/roles/LoopwrightSessionRole"
    role = Role.objects.get(tenant=alice.tenant, name="LoopwrightSessionRole")
    assert role.policies.get(name="readers").document == GOOD
    edit = "/iam/roles/LoopwrightSessionRole/policies/readers"
    assert "registry:List*" in alice.get(edit).content.decode()
    changed = GOOD | {"Statement": [GOOD["Statement"][0] | {"Action": "registry:Describe*"}]}
    r = alice.post(edit, {"policy_name": "renamed", "document": json.dumps(changed)})
    assert r.status_code == 302
    assert role.policies.get(name="readers").document["Statement"][0]["Action"] == (
        "registry:Describe*"
    )
    assert not role.policies.filter(name="renamed").exists()
    r = alice.post(f"{edit}/delete")
    assert r.status_code == 302 and not role.policies.filter(name="readers").exists()
    assert alice.get(edit).status_code == 404


def test_the_policy_editor_numbers_lines_and_marks_the_errors_line(alice, charlie) -> None:
    url = "/iam/roles/LoopwrightSessionRole/policies/new"
    text = json.dumps(BAD, indent=2)
    wrong = next(i for i, line in enumerate(text.splitlines(), 1) if "Allw" in line)
    body = alice.post(url, {"policy_name": "readers", "document": text}).content.decode()
    assert f'<li id="line-{wrong}" class="marked">{wrong}</li>' in body
    assert f'<a href="#line-{wrong}" class="line-ref">Line {wrong}</a>:' in body
    assert body.count('<li id="line-') == len(text.splitlines())
    broken = '{\n  "Version": "2012-10-17",\n  "Statement": [\n    {"Effect": "Allow",}\n  ]\n}'
    body = alice.post(url, {"policy_name": "readers", "document": broken}).content.decode()
    assert '<li id="line-4" class="marked">4</li>' in body and "Line 4" in body
    trusting(alice)  # a role charlie's account does not have
    theirs = "/iam/roles/Deployer/policies/new"
    assert charlie.post(theirs, {"policy_name": "x", "document": text}).status_code == 404


def test_trust_policy_editor(alice) -> None:
    trusting(alice)
    url = "/iam/roles/Deployer/trust-policy"
    assert "sts:AssumeRole" in alice.get(url).content.decode()
    r = alice.post(url, {"trust_policy": json.dumps(GOOD)})
    body = r.content.decode()
    assert r.status_code == 400 and "Statement[0].Action: a trust policy" in body
    assert 'id="id_trust_policy_error"' in body
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "sessions.loopwright.dev"},
                       "Action": "sts:AssumeRole"}],
    }  # fmt: skip
    r = alice.post(url, {"trust_policy": json.dumps(trust)})
    assert r.status_code == 302
    assert Role.objects.get(tenant=alice.tenant, name="Deployer").trust_policy == trust


def test_members_and_their_policies(alice, bob) -> None:
    page = alice.get("/iam/users").content.decode()
    assert "alice@example.com" in page and "bob@example.com" in page and "Member" in page
    page = alice.get("/iam/users/bob@example.com").content.decode()
    assert "UseKeys" in page and "No inline policies" in page  # the built-in member policy
    url = "/iam/users/bob@example.com/policies/new"
    r = alice.post(url, {"policy_name": "x", "document": json.dumps(BAD)})
    assert r.status_code == 400 and "Statement[1].Effect" in r.content.decode()
    deny = {"Version": "2012-10-17",
            "Statement": [{"Sid": "NoKeys", "Effect": "Deny", "Action": "kms:*", "Resource": "*"}]}  # fmt: skip
    r = alice.post(url, {"policy_name": "no-kms", "document": json.dumps(deny)})
    assert r.status_code == 302 and r["Location"] == "/iam/users/bob@example.com"
    assert "NoKeys" in alice.get(r["Location"]).content.decode()
    r = alice.post("/iam/users/bob@example.com/policies/no-kms/delete")
    assert r.status_code == 302
    assert "No inline policies" in alice.get("/iam/users/bob@example.com").content.decode()


def test_api_keys_are_shown_once_and_revoked(alice) -> None:
    page = alice.get("/iam/keys").content.decode()
    first = ApiKey.objects.get(user=alice.user)
    assert first.prefix in page and "active" in page
    made = alice.post("/iam/keys", {"name": "laptop", "owner": "me", "expires_in_days": "30"})
    assert made.status_code == 302  # post/redirect/get: a reload never makes another key
    r = alice.get(made["Location"])
    body = r.content.decode()
    assert r.status_code == 200 and r["Cache-Control"].startswith("max-age=0")
    raw = re.search(r'<code id="raw-key">(tml-[^<]+)</code>', body).group(1)
    assert 'class="secret"' in body and 'data-copy="#raw-key"' in body
    key = api_key_for(raw)
    assert key is not None and key.user_id == alice.user.pk and key.name == "laptop"
    assert made["Location"] == f"/iam/keys?owner=me&created={key.prefix}"
    reloaded = alice.get(made["Location"]).content.decode()
    assert raw not in reloaded and "was shown once" in reloaded  # once
    assert ApiKey.objects.filter(user=alice.user).count() == 2
    assert raw not in alice.get("/iam/keys").content.decode()
    r = alice.post("/iam/keys", {"name": "", "owner": "me", "expires_in_days": "0"})
    assert r.status_code == 400 and "greater than or equal to 1" in r.content.decode()
    r = alice.post(f"/iam/keys/{key.prefix}/revoke")
    assert r.status_code == 302 and api_key_for(raw) is None
    assert "revoked" in alice.get("/iam/keys").content.decode()


def test_role_keys_need_the_roles_trust(alice) -> None:
    r = alice.post("/iam/keys", {"name": "ci", "owner": "role:LoopwrightSessionRole"})
    body = r.content.decode()
    assert r.status_code == 400 and "does not let" in body and 'id="id_owner_error"' in body
    trusting(alice)
    r = alice.get(alice.post("/iam/keys", {"name": "ci", "owner": "role:Deployer"})["Location"])
    assert r.status_code == 200
    raw = re.search(r'<code id="raw-key">(tml-[^<]+)</code>', r.content.decode()).group(1)
    key = api_key_for(raw)
    assert key.role.name == "Deployer"
    assert f"<code>{key.prefix}</code>" in r.content.decode()  # listed with the role's keys
    page = alice.get("/iam/keys?owner=role:Deployer").content.decode()
    assert key.prefix in page
    assert alice.post(f"/iam/keys/{key.prefix}/revoke")["Location"] == (
        "/iam/keys?owner=role%3ADeployer"
    )


def test_simulator_names_the_deciding_statement(alice, bob) -> None:
    page = alice.get("/iam/simulator").content.decode()
    assert "bob@example.com" in page and "LoopwrightSessionRole" in page and "kms:RotateKey" in page
    r = alice.get(
        "/iam/simulator",
        {"principal": "user:bob@example.com", "action": "iam:CreateRole", "resource": ""},
    )
    body = r.content.decode()
    assert (
        "Denied" in body
        and "ImplicitDeny" in body
        and "No policy allows iam:CreateRole on *" in body
    )
    r = alice.get(
        "/iam/simulator",
        {"principal": "user:bob@example.com", "action": "registry:ListModelPackageGroups"},
    )
    body = r.content.decode()
    assert (
        "Allowed" in body
        and "membership:member" in body
        and "&quot;Sid&quot;: &quot;Train&quot;" in body
    )
    r = alice.get(
        "/iam/simulator",
        {
            "principal": "role:LoopwrightSessionRole",
            "action": "kms:Decrypt",
            "resource": f"arn:loopwright:kms::{alice.tenant.account_id}:key/abc",
        },
    )
    assert "Allowed" in r.content.decode() and "Checkpoints" in r.content.decode()
    alice.post(
        "/iam/users/bob@example.com/policies/new",
        {
            "policy_name": "no-registry",
            "document": json.dumps(
                {"Version": "2012-10-17",
                 "Statement": [{"Sid": "Stop", "Effect": "Deny", "Action": "registry:*", "Resource": "*"}]}
            ),
        },
    )  # fmt: skip
    r = alice.get(
        "/iam/simulator",
        {"principal": "user:bob@example.com", "action": "registry:ListModelPackageGroups"},
    )
    assert "ExplicitDeny" in r.content.decode() and "no-registry" in r.content.decode()
    r = alice.get("/iam/simulator", {"principal": "user:nobody", "action": "iam:GetRole"})
    assert r.status_code == 400 and "Select a valid choice" in r.content.decode()


def test_charlie_sees_nothing_of_acme(alice, charlie) -> None:
    trusting(alice)
    raw_key = ApiKey.objects.get(user=alice.user)
    for url in (
        "/iam/roles/Deployer",
        "/iam/roles/Deployer/trust-policy",
        "/iam/roles/Deployer/policies/ship",
        "/iam/roles/Deployer/policies/new",
        "/iam/users/alice@example.com",
        "/iam/users/alice@example.com/policies/new",
    ):
        assert charlie.get(url).status_code == 404, url
    posts = {
        "/iam/roles/Deployer/policies/ship": {"policy_name": "ship", "document": json.dumps(GOOD)},
        "/iam/roles/Deployer/trust-policy": {"trust_policy": "{}"},
        "/iam/roles/Deployer/delete": {},
        "/iam/roles/Deployer/policies/ship/delete": {},
        "/iam/users/alice@example.com/policies/new": {"policy_name": "x", "document": "{}"},
        f"/iam/keys/{raw_key.prefix}/revoke": {},
    }
    for url, data in posts.items():
        assert charlie.post(url, data).status_code == 404, url
    raw_key.refresh_from_db()
    assert raw_key.revoked_at is None and Role.objects.filter(name="Deployer").exists()
    assert "Deployer" not in charlie.get("/iam/roles").content.decode()
    assert "alice@" not in charlie.get("/iam/users").content.decode()
    assert raw_key.prefix not in charlie.get("/iam/keys").content.decode()
    assert charlie.get("/iam/keys?owner=role:Deployer").status_code == 200  # shows charlie's own
    page = charlie.get("/iam/simulator").content.decode()
    assert "alice@" not in page and "Deployer" not in page
    r = charlie.get("/iam/simulator", {"principal": "role:Deployer", "action": "iam:GetRole"})
    assert r.status_code == 400
    r = charlie.post("/iam/keys", {"name": "x", "owner": "role:Deployer"})
    assert r.status_code == 400 and not ApiKey.objects.filter(name="x").exists()


def test_bob_the_member_is_refused_what_members_may_not_do(alice, bob) -> None:
    assert bob.get("/iam/roles").status_code == 200  # members may list and read roles
    r = bob.post("/iam/roles", {"name": "Mine", "trust_policy": "{}"})
    assert r.status_code == 403 and "iam:CreateRole" in r.content.decode()
    assert bob.get("/iam/users/alice@example.com").status_code == 403
    r = bob.post(
        "/iam/roles/LoopwrightSessionRole/policies/new",
        {"policy_name": "x", "document": json.dumps(GOOD)},
    )
    assert r.status_code == 403
    assert bob.post("/iam/roles/LoopwrightSessionRole/delete").status_code == 403
    assert bob.get("/iam/simulator").status_code == 200
    r = bob.get("/iam/simulator", {"principal": "user:alice@example.com", "action": "iam:GetRole"})
    assert r.status_code == 403
    alice_key = ApiKey.objects.get(user=alice.user)
    assert bob.post(f"/iam/keys/{alice_key.prefix}/revoke").status_code == 403
    # his own keys he may make and revoke
    r = bob.post("/iam/keys", {"name": "bob laptop", "owner": "me"})
    assert r.status_code == 302
    mine = ApiKey.objects.get(name="bob laptop")
    assert bob.post(f"/iam/keys/{mine.prefix}/revoke").status_code == 302
    other, _ = api_key_create(tenant=alice.tenant, user=alice.user, name="alice ci")
    assert bob.post(f"/iam/keys/{other.prefix}/revoke").status_code == 403


def test_simulator_takes_several_actions_and_checks_the_resource(alice, bob, charlie) -> None:
    page = alice.get("/iam/simulator").content.decode()
    assert "data-action-search" in page and 'data-text="iam:createapikey' in page
    asked = [("principal", "user:bob@example.com"), ("action", "iam:CreateRole"),
             ("action", "registry:ListModelPackageGroups"), ("action", "sessions:Sample")]  # fmt: skip
    from urllib.parse import urlencode

    body = alice.get(f"/iam/simulator?{urlencode(asked)}").content.decode()
    assert "2 of 3 allowed" in body
    assert "Denied: <code>iam:CreateRole</code>" in body
    assert "Allowed: <code>registry:ListModelPackageGroups</code>" in body
    assert body.count('value="sessions:Sample" checked') == 1  # what was asked stays ticked
    for resource, says in (
        ("not-an-arn", "not an ARN"),
        (f"arn:loopwright:iam::{charlie.tenant.account_id}:role/X", "only this account"),
    ):
        r = alice.get(f"/iam/simulator?{urlencode([*asked, ('resource', resource)])}")
        assert r.status_code == 400 and says in r.content.decode(), resource
        assert 'id="id_resource_error"' in r.content.decode() or "errorlist" in r.content.decode()
    key = f"arn:loopwright:kms::{alice.tenant.account_id}:key/abc"
    r = alice.get(
        f"/iam/simulator?{urlencode([asked[0], ('action', 'iam:GetRole'), ('resource', key)])}"
    )
    assert "iam:GetRole applies to role ARNs; this resource is a key" in r.content.decode()


def test_simulator_takes_condition_keys(alice, bob) -> None:
    from controlplane.iam.services import user_policy_put
    from controlplane.tenants.selectors import membership_get

    membership = membership_get(tenant=alice.tenant, username="bob@example.com")
    office = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "OfficeOnly",
                "Effect": "Deny",
                "Action": "registry:*",
                "Resource": "*",
                "Condition": {"NotIpAddress": {"loopwright:SourceIp": "10.0.0.0/8"}},
            }
        ],
    }
    user_policy_put(membership=membership, name="office", document=office)
    ask = {"principal": "user:bob@example.com", "action": "registry:ListModelPackageGroups"}
    inside = alice.get("/iam/simulator", {**ask, "context": '{"loopwright:SourceIp": "10.1.2.3"}'})
    assert inside.status_code == 200 and "Allowed" in inside.content.decode()
    outside = alice.get(
        "/iam/simulator", {**ask, "context": '{"loopwright:SourceIp": "203.0.113.7"}'}
    ).content.decode()
    assert "Denied" in outside and "OfficeOnly" in outside and "203.0.113.7" in outside
    for bad, says in (
        ("{not json", "not JSON"),
        ('["a"]', "a JSON object"),
        ('{"loopwright:SourceIp": {"a": 1}}', "loopwright:SourceIp: a string, number or boolean"),
    ):
        r = alice.get("/iam/simulator", {**ask, "context": bad})
        assert r.status_code == 400 and says in r.content.decode(), bad


def _invite(person, email: str, role: str = "member") -> str:
    made = person.post("/iam/users/invite", {"email": email, "role": role})
    assert made.status_code == 302, made.content  # post/redirect/get
    r = person.get(made["Location"])
    assert r.status_code == 200 and r["Cache-Control"].startswith("max-age=0")
    page = r.content.decode()
    match = re.search(r"/invitations/accept#token=(inv-[\w-]+)", page)
    assert match and "shown <strong>only now</strong>" in page
    return match.group(1)


def test_invite_a_new_person_who_joins_with_a_password(alice, bob, charlie) -> None:
    from django.test import Client

    from controlplane.tenants.models import Invitation, Membership

    token = _invite(alice, "carol@example.com")
    assert not Invitation.objects.filter(digest__contains=token).exists()  # a digest only
    carol = Client()
    form = carol.get("/invitations/accept")  # the token stays in the link's fragment
    assert form.status_code == 200 and "Choose a password" in form.content.decode()
    assert "Invitation code" in form.content.decode()
    assert form["Referrer-Policy"] == "no-referrer"
    weak = carol.post("/invitations/accept", {"token": token, "password": "short"})
    assert weak.status_code == 400 and "password" in weak.content.decode().lower()
    joined = carol.post("/invitations/accept", {"token": token, "password": PASSWORD})
    assert joined.status_code == 302 and joined["Location"] == "/overview"
    membership = Membership.objects.get(user__email="carol@example.com")
    assert (membership.tenant, membership.role) == (alice.tenant, "member")
    assert "carol@example.com" in carol.get("/iam/users").content.decode()
    # once only; a member may not invite; charlie's account is not alice's
    again = Client().post("/invitations/accept", {"token": token, "password": PASSWORD})
    assert again.status_code == 404 and "has expired or been used" in again.content.decode()
    assert (
        bob.post("/iam/users/invite", {"email": "x@example.com", "role": "member"}).status_code
        == 403
    )
    assert charlie.get("/iam/users/carol@example.com").status_code == 404


def test_an_invitation_is_for_its_address(alice, charlie) -> None:
    token = _invite(alice, "dave@example.com", role="admin")
    wrong = charlie.post("/invitations/accept", {"token": token})  # signed in as charlie
    assert wrong.status_code == 400 and "for another email address" in wrong.content.decode()
    bad = alice.post("/iam/users/invite", {"email": "not-an-email", "role": "x"})
    assert bad.status_code == 400 and "Enter a valid email address" in bad.content.decode()


def test_change_a_members_role_and_remove_them(alice, bob) -> None:
    from controlplane.tenants.models import Membership

    page = alice.get("/iam/users/bob@example.com").content.decode()
    assert "Change membership" in page and "Remove from the account" in page
    r = alice.post("/iam/users/bob@example.com/membership", {"role": "admin"})
    assert r.status_code == 302
    assert Membership.objects.get(user__email="bob@example.com").role == "admin"
    # the only owner cannot step down or leave: the account keeps an owner
    r = alice.post("/iam/users/alice@example.com/membership", {"role": "member"})
    assert "keeps at least one owner" in alice.get(r["Location"]).content.decode()
    assert alice.post("/iam/users/alice@example.com/remove").status_code == 302
    assert Membership.objects.get(user__email="alice@example.com").role == "owner"
    bob.post("/iam/users/alice@example.com/remove")  # an admin never removes an owner
    assert Membership.objects.get(user__email="alice@example.com").role == "owner"
    r = alice.post("/iam/users/bob@example.com/remove")
    assert r.status_code == 302 and r["Location"] == "/iam/users"
    assert not Membership.objects.filter(user__email="bob@example.com").exists()
    assert not ApiKey.objects.filter(user__email="bob@example.com", revoked_at=None).exists()


def test_a_reload_of_the_invitation_page_shows_no_link_and_invites_nobody(alice, bob, charlie):
    from controlplane.tenants.models import Invitation

    made = alice.post("/iam/users/invite", {"email": "erin@example.com", "role": "admin"})
    token = re.search(r"token=(inv-[\w-]+)", alice.get(made["Location"]).content.decode()).group(1)
    again = alice.get(made["Location"]).content.decode()
    assert token not in again and "was shown once" in again
    assert Invitation.objects.filter(email="erin@example.com").count() == 1
    # pending on the members page, and revocable there
    members = alice.get("/iam/users").content.decode()
    assert "Pending invitations" in members and "erin@example.com" in members
    invitation = Invitation.objects.get(email="erin@example.com")
    assert charlie.get(made["Location"]).status_code == 404
    assert charlie.post(f"/iam/users/invitations/{invitation.pk}/revoke").status_code == 404
    assert "erin@example.com" not in charlie.get("/iam/users").content.decode()
    assert bob.post(f"/iam/users/invitations/{invitation.pk}/revoke").status_code == 403
    gone = alice.post(f"/iam/users/invitations/{invitation.pk}/revoke")
    assert gone.status_code == 302 and not Invitation.objects.filter(pk=invitation.pk).exists()
    refused = type(alice)().post("/invitations/accept", {"token": token, "password": PASSWORD})
    assert refused.status_code == 404
    assert "No invitation is waiting" in alice.get("/iam/users").content.decode()


def test_inviting_a_member_warns_and_invites_nobody(alice, bob):
    from controlplane.tenants.models import Invitation

    page = alice.get("/iam/users").content.decode()
    assert 'id="member-emails"' in page and "bob@example.com" in page  # the form warns as you type
    r = alice.post("/iam/users/invite", {"email": "Bob@example.com", "role": "admin"})
    body = r.content.decode()
    assert r.status_code == 400 and 'id="invite_email_error"' in body
    assert "already a member of this account (member)" in body
    assert not Invitation.objects.exists()


def test_a_member_sees_the_invite_form_as_not_theirs(bob):
    page = bob.get("/iam/users").content.decode()
    assert "Create invitation" not in page and "iam:CreateUser" in page


def test_access_keys_are_shown_once_sign_and_are_revoked(alice, bob, charlie) -> None:
    from controlplane.access_keys.authentication import caller_of
    from controlplane.access_keys.models import AccessKey
    from controlplane.access_keys.sigv4 import SigV4Error
    from tests.aws.signing import as_django, signed

    assert "no access keys yet" in alice.get("/iam/access-keys").content.decode()
    made = alice.post("/iam/access-keys", {"name": "boto3", "owner": "me", "expires_in_days": ""})
    assert made.status_code == 302
    r = alice.get(made["Location"])
    body = r.content.decode()
    assert r.status_code == 200 and r["Cache-Control"].startswith("max-age=0")
    key_id = re.search(r"AWS_ACCESS_KEY_ID=(LWAK\w+)", body).group(1)
    secret = re.search(r"AWS_SECRET_ACCESS_KEY=([\w+/]+)", body).group(1)
    assert "SAGEMAKER_TRAINING_SESSION_ENDPOINT=http://testserver/sagemaker" in body
    assert made["Location"] == f"/iam/access-keys?owner=me&created={key_id}"
    caller = caller_of(as_django(signed(key_id, secret)))
    assert caller.principal.arn.endswith(":user/alice@example.com")
    reloaded = alice.get(made["Location"]).content.decode()
    assert secret not in reloaded and "was shown once" in reloaded
    listing = alice.get("/iam/access-keys").content.decode()
    assert key_id in listing and secret not in listing
    # charlie neither sees nor revokes it; bob may not revoke alice's
    assert key_id not in charlie.get("/iam/access-keys").content.decode()
    assert charlie.post(f"/iam/access-keys/{key_id}/revoke").status_code == 404
    assert bob.post(f"/iam/access-keys/{key_id}/revoke").status_code == 403
    r = charlie.post("/iam/access-keys", {"name": "x", "owner": "role:LoopwrightSessionRole"})
    assert r.status_code == 400 and not AccessKey.objects.filter(name="x").exists()
    r = alice.post(f"/iam/access-keys/{key_id}/revoke")
    assert r.status_code == 302 and "revoked" in alice.get("/iam/access-keys").content.decode()
    with pytest.raises(SigV4Error):
        caller_of(as_django(signed(key_id, secret)))


def test_the_keys_page_shows_what_each_key_spent_this_month(alice, charlie) -> None:
    from datetime import UTC, datetime

    from controlplane.iam.models import ApiKey
    from controlplane.metering.models import Meter, UsageRecord
    from controlplane.metering.rollup import usage_rows_write

    from .test_pages_billing import BASE, prices

    prices()
    key = ApiKey.objects.filter(user=alice.user).first()
    row = UsageRecord(
        tenant=alice.tenant, session_id="sess-a", base_model=BASE, meter=Meter.TRAIN_TOKENS,
        quantity=1_000_000, occurred_at=datetime.now(UTC), api_key=key.prefix,
    )  # fmt: skip
    usage_rows_write([row])
    html = alice.get("/iam/keys").content.decode()
    assert "Spent since" in html
    after = html[html.index(f"<code>{key.prefix}</code>") :]
    spent = re.search(r'<a href="/billing\?api_key=' + key.prefix + r'">(\$[\d.,]+)</a>', after)
    assert spent and spent.group(1) == "$0.30", spent  # a million training tokens at $0.30
    assert key.prefix not in charlie.get("/iam/keys").content.decode()
