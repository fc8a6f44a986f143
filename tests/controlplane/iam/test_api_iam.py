"""Accounts, members, roles, policies, API keys and the audit log through the API."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.iam.models import ApiKey
from controlplane.tenants.models import Membership
from tests.support.callers import Person, member
from tests.support.wire import open_session

pytestmark = pytest.mark.django_db

DENY_FWDBWD = {
    "Version": "2012-10-17",
    "Statement": [
        {"Sid": "NoTraining", "Effect": "Deny", "Action": "sessions:Forward*", "Resource": "*"}
    ],
}


def test_signup_gives_a_working_key_a_session_role_and_a_login() -> None:
    anon = APIClient()
    r = anon.post(
        "/api/v1/auth/signup",
        {"email": "Dana@Example.com", "password": "a long passphrase 42", "tenant_name": "labs"},
        format="json",
    )
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["user"] == "dana@example.com" and body["role"] == "owner"
    assert (
        body["session_role_arn"]
        == f"arn:loopwright:iam::{body['account_id']}:role/LoopwrightSessionRole"
    )
    keyed = APIClient()
    keyed.credentials(HTTP_X_API_KEY=body["api_key"])
    who = keyed.get("/api/v1/auth/whoami").json()
    assert who["arn"] == f"arn:loopwright:iam::{body['account_id']}:user/dana@example.com"
    # the signup also logged the browser in
    assert anon.get("/api/v1/auth/whoami").json()["membership_role"] == "owner"
    again = APIClient().post(
        "/api/v1/auth/signup",
        {"email": "dana@example.com", "password": "another passphrase 7", "tenant_name": "x"},
        format="json",
    )
    assert again.status_code == 409 and again.json()["field"] == "email"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"email": "not-an-email", "password": "a long passphrase 42", "tenant_name": "t"},
            "email",
        ),
        ({"email": "e@example.com", "password": "short", "tenant_name": "t"}, "password"),
        (
            {"email": "e@example.com", "password": "a long passphrase 42", "tenant_name": ""},
            "tenant_name",
        ),
        ({"email": "e@example.com", "password": "a long passphrase 42"}, "tenant_name"),
        (
            {"email": "e@example.com", "password": "x" * 20, "tenant_name": "t", "plan": "pro"},
            "plan",
        ),
    ],
)
def test_bad_signups_name_the_field_and_save_nothing(body, field) -> None:
    r = APIClient().post("/api/v1/auth/signup", body, format="json")
    assert r.status_code == 400 and r.json()["field"] == field, r.content
    assert not Membership.objects.exists()


def test_login_is_throttled_after_repeated_failures(settings) -> None:
    settings.LOGIN_FAILURE_LIMIT = 3
    APIClient().post(
        "/api/v1/auth/signup",
        {"email": "e@example.com", "password": "a long passphrase 42", "tenant_name": "t"},
        format="json",
    )
    browser = APIClient()
    for _ in range(3):
        r = browser.post(
            "/api/v1/auth/login", {"email": "e@example.com", "password": "wrong"}, format="json"
        )
        assert r.status_code == 401
    r = browser.post(
        "/api/v1/auth/login",
        {"email": "e@example.com", "password": "a long passphrase 42"},
        format="json",
    )
    assert r.status_code == 429 and int(r["Retry-After"]) > 0
    settings.LOGIN_FAILURE_LIMIT = 10
    r = browser.post(
        "/api/v1/auth/login",
        {"email": "e@example.com", "password": "a long passphrase 42"},
        format="json",
    )
    assert r.status_code == 200 and r.json()["accounts"][0]["role"] == "owner"


def test_invitation_joins_the_tenant_once(alice: Person, bob: Person, charlie: Person) -> None:
    r = bob.post("iam/users", {"email": "erin@example.com", "role": "member"})
    assert r.status_code == 403 and "iam:CreateUser" in r.json()["detail"]
    r = alice.post("iam/users", {"email": "erin@example.com", "role": "admin"})
    assert r.status_code == 201
    token = r.json()["token"]
    browser = APIClient()
    r = browser.post(
        "/api/v1/auth/accept-invitation",
        {"token": token, "password": "erin's passphrase 1"},
        format="json",
    )
    assert r.status_code == 201 and r.json()["role"] == "admin"
    assert browser.get("/api/v1/iam/users").status_code == 200  # logged in, admin
    again = APIClient().post(
        "/api/v1/auth/accept-invitation",
        {"token": token, "password": "erin's passphrase 1"},
        format="json",
    )
    assert again.status_code == 404
    users = {u["user"]: u["role"] for u in alice.get("iam/users").json()["users"]}
    assert users == {
        "alice@example.com": "owner",
        "bob@example.com": "member",
        "erin@example.com": "admin",
    }
    assert charlie.get("iam/users/erin@example.com").status_code == 404
    assert "erin@example.com" not in str(charlie.get("iam/users").json())


def test_the_last_owner_stays(alice: Person) -> None:
    r = alice.client.patch("/api/v1/iam/users/alice@example.com", {"role": "member"}, format="json")
    assert r.status_code == 409 and r.json()["field"] == "role"


def test_roles_and_policies_are_validated_before_anything_is_saved(
    alice: Person, bob: Person
) -> None:
    bad = {
        "name": "trainer",
        "policies": {
            "p": {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": "sessions:*", "Resource": "*"},
                    {
                        "Effect": "Allow",
                        "Action": "sessions:Sample",
                        "Resource": "*",
                        "Condition": {"StringLikes": {"loopwright:SourceIp": "1.2.3.4"}},
                    },
                ],
            }
        },
    }
    r = alice.post("iam/roles", bad)
    assert r.status_code == 400
    assert r.json()["field"] == "policies.p.Statement[1].Condition", r.json()
    assert "StringLikes" in r.json()["detail"]
    assert alice.get("iam/roles/trainer").status_code == 404
    r = alice.post("iam/roles", {"name": "bad name!"})
    assert r.status_code == 400 and r.json()["field"] == "name"
    r = alice.post("iam/roles", {"name": "trainer", "description": "fine-tunes"})
    assert r.status_code == 201 and r.json()["trust_policy"]["Statement"][0]["Principal"] == {
        "Service": "sessions.loopwright.dev"
    }
    assert alice.post("iam/roles", {"name": "trainer"}).status_code == 409
    r = alice.client.put(
        "/api/v1/iam/roles/trainer/policies/train",
        {
            "document": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "sessions:Nope", "Resource": "*"}],
            }
        },
        format="json",
    )
    assert r.status_code == 400 and r.json()["field"] == "document.Statement[0].Action"
    r = alice.client.put(
        "/api/v1/iam/roles/trainer/policies/train",
        {
            "document": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "sessions:*", "Resource": "*"}],
            }
        },
        format="json",
    )
    assert r.status_code == 200
    assert alice.get("iam/roles/trainer/policies").json() == {"policy_names": ["train"]}
    # bob (a member) may read roles but not change them; the denial names action and resource
    assert bob.get("iam/roles/trainer").status_code == 200
    r = bob.client.delete("/api/v1/iam/roles/trainer")
    assert r.status_code == 403
    assert "iam:DeleteRole" in r.json()["detail"] and ":role/trainer" in r.json()["detail"]
    assert alice.client.delete("/api/v1/iam/roles/trainer").status_code == 204


def test_a_session_needs_a_role_it_may_pass_and_that_trusts_sessions(
    alice: Person, bob: Person, charlie: Person
) -> None:
    r = alice.post("create_session", {"tags": [], "sdk_version": "t"})
    assert r.status_code == 400 and r.json()["field"] == "role_arn"
    r = alice.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": charlie.role_arn})
    assert r.status_code == 404 and r.json()["field"] == "role_arn"
    alice.post(
        "iam/roles",
        {
            "name": "nobody",
            "trust_policy": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Loopwright": "123456789012"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            },
        },
    )
    nobody = alice.role_arn.replace("LoopwrightSessionRole", "nobody")
    r = alice.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": nobody})
    assert r.status_code == 400 and "trust policy" in r.json()["detail"]
    alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-pass",
        {
            "document": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Deny", "Action": "iam:PassRole", "Resource": "*"}],
            }
        },
        format="json",
    )
    r = bob.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": bob.role_arn})
    assert r.status_code == 403 and "iam:PassRole" in r.json()["detail"]
    session_id = open_session(alice)
    assert alice.get(f"sessions/{session_id}").json()["platform"]["role_arn"] == alice.role_arn


def test_an_inline_deny_stops_training_and_the_audit_log_says_why(
    alice: Person, bob: Person, charlie: Person, runtime
) -> None:
    from tests.support.wire import create_model, datum, fwdbwd

    session_id = open_session(bob)
    model_id = create_model(bob, runtime, session_id)
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/freeze",
        {"document": DENY_FWDBWD},
        format="json",
    )
    assert r.status_code == 200
    r = bob.post("forward_backward", fwdbwd(model_id, 1, [datum([1, 2, 3])]))
    assert r.status_code == 403
    assert "sessions:ForwardBackward" in r.json()["detail"] and model_id in r.json()["detail"]
    # the refused seq_id is used up, so the next request is not stuck behind it
    alice.client.delete("/api/v1/iam/users/bob@example.com/policies/freeze")
    r = bob.post("forward_backward", fwdbwd(model_id, 2, [datum([1, 2, 3])]))
    assert r.status_code == 200, r.content
    denied = alice.get("audit/events", {"allowed": "false"}).json()["events"]
    assert denied[0]["action"] == "sessions:ForwardBackward"
    assert denied[0]["principal"].endswith(":user/bob@example.com")
    assert denied[0]["effect"] == "ExplicitDeny" and denied[0]["statement"] == "NoTraining"
    assert denied[0]["policy"] == "freeze"
    assert bob.get("audit/events").status_code == 403  # members do not read the audit log
    assert charlie.get("audit/events", {"principal": denied[0]["principal"]}).json()["events"] == []


def test_api_keys_belong_to_a_principal_and_can_be_revoked(
    alice: Person, bob: Person, charlie: Person
) -> None:
    r = bob.post("iam/api-keys", {"name": "laptop", "expires_in_days": 30})
    assert r.status_code == 201
    raw, prefix = r.json()["api_key"], r.json()["prefix"]
    assert raw.startswith("tml-") and r.json()["principal"].endswith(":user/bob@example.com")
    stored = ApiKey.objects.get(prefix=prefix)
    assert raw not in (stored.digest, stored.name) and stored.expires_at is not None
    listed = bob.get("iam/api-keys").json()["api_keys"]
    assert {k["prefix"] for k in listed} >= {prefix} and all("api_key" not in k for k in listed)
    assert (
        bob.post("iam/api-keys", {"name": "x", "expires_in_days": 0}).json()["field"]
        == "expires_in_days"
    )
    assert charlie.post(f"iam/api-keys/{prefix}/revoke").status_code == 404
    assert bob.post(f"iam/api-keys/{prefix}/revoke").status_code == 200
    dead = APIClient()
    dead.credentials(HTTP_X_API_KEY=raw)
    assert dead.get("/api/v1/auth/whoami").status_code == 401


def test_a_role_key_acts_as_the_role_once_its_trust_names_the_creator(alice: Person) -> None:
    r = alice.post("iam/api-keys", {"name": "ci", "role_arn": alice.role_arn})
    assert r.status_code == 400 and "trust policy" in r.json()["detail"]
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sessions.loopwright.dev"},
                "Action": "sts:AssumeRole",
            },
            {
                "Effect": "Allow",
                "Principal": {"Loopwright": alice.tenant.account_id},
                "Action": "sts:AssumeRole",
            },
        ],
    }
    r = alice.client.put(
        "/api/v1/iam/roles/LoopwrightSessionRole/trust-policy",
        {"trust_policy": trust},
        format="json",
    )
    assert r.status_code == 200, r.content
    r = alice.post("iam/api-keys", {"name": "ci", "role_arn": alice.role_arn})
    assert r.status_code == 201
    ci = APIClient()
    ci.credentials(HTTP_X_API_KEY=r.json()["api_key"])
    assert ci.get("/api/v1/auth/whoami").json()["arn"] == alice.role_arn
    # no role_arn: the session runs as the calling role
    r = ci.post("/api/v1/create_session", {"tags": [], "sdk_version": "t"}, format="json")
    assert r.status_code == 200, r.content
    # the role may train but not manage IAM
    assert ci.get("/api/v1/iam/roles").status_code == 403


def test_a_billing_viewer_reads_but_does_not_train(alice: Person) -> None:
    viewer = member("vera", alice, Membership.Role.BILLING_VIEWER)
    assert viewer.get("sessions").status_code == 200
    r = viewer.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn})
    assert r.status_code == 403 and "sessions:CreateTrainingSession" in r.json()["detail"]


def test_expired_keys_are_refused_and_old_audit_events_pruned(alice: Person, settings) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from controlplane.audit.models import AuditEvent
    from controlplane.housekeeping.janitor import sweep

    r = alice.post("iam/api-keys", {"name": "short", "expires_in_days": 1})
    ApiKey.objects.filter(prefix=r.json()["prefix"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    stale = APIClient()
    stale.credentials(HTTP_X_API_KEY=r.json()["api_key"])
    assert stale.get("/api/v1/auth/whoami").status_code == 401
    assert AuditEvent.objects.filter(tenant=alice.tenant).count() >= 1
    settings.AUDIT_RETENTION_DAYS = 30
    AuditEvent.objects.update(at=timezone.now() - timedelta(days=31))
    alice.get("sessions")  # a fresh event survives
    assert sweep()["pruned_audit_events"] >= 1
    assert list(AuditEvent.objects.values_list("action", flat=True)) == [
        "sessions:ListTrainingSessions"
    ]


def test_the_session_role_must_be_allowed_to_use_the_checkpoint_key(alice: Person, runtime) -> None:
    from tests.support.wire import create_model, result

    train_only = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sessions:*", "Resource": "*"}],
    }
    r = alice.post("iam/roles", {"name": "no-keys", "policies": {"train": train_only}})
    assert r.status_code == 201
    r = alice.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": r.json()["arn"]})
    session_id = r.json()["session_id"]
    model_id = create_model(alice, runtime, session_id)
    r = alice.post("save_weights", {"model_id": model_id, "seq_id": 1, "path": "s"})
    assert r.status_code == 403, r.content
    assert "role/no-keys" in r.json()["detail"] and "kms:GenerateDataKey" in r.json()["detail"]
    # the default session role may: the same model saves once the role is allowed
    alice.client.put(
        "/api/v1/iam/roles/no-keys/policies/keys",
        {
            "document": {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": "*"},
                    {"Effect": "Allow", "Action": "registry:CreateModelPackage", "Resource": "*"},
                ],
            }
        },
        format="json",
    )
    r = alice.post("save_weights", {"model_id": model_id, "seq_id": 2, "path": "s"})
    assert r.status_code == 200, r.content
    assert result(alice, runtime, r.json())["path"].endswith("/weights/s")


def test_list_paging_parameters_are_checked(alice: Person) -> None:
    for path, name, bad in [
        ("sessions", "limit", "0"),
        ("sessions", "offset", "x"),
        ("training_runs", "limit", "5000"),
        ("training_runs", "offset", "-1"),
        ("audit/events", "limit", "abc"),
    ]:
        r = alice.get(path, {name: bad})
        assert r.status_code == 400 and r.json()["field"] == name, (path, name, r.content)
