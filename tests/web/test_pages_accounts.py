"""Landing, sign up, log in and out, the account page and the account switch."""

from __future__ import annotations

import pytest
from django.test import Client

from controlplane.iam.models import ApiKey, Role
from controlplane.tenants.models import Membership, Tenant, Throttle
from controlplane.tenants.services import membership_add
from tests.people import PASSWORD

pytestmark = pytest.mark.django_db

SIGNUP = {"email": "dana@example.com", "password": PASSWORD, "tenant_name": "Dana's lab"}


def test_landing_explains_and_sends_people_who_are_logged_in_to_the_overview(client, alice):
    page = client.get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "training sessions" in html and 'href="/signup"' in html and 'href="/login"' in html
    assert alice.get("/").headers["Location"] == "/overview"


@pytest.mark.parametrize("url", ["/overview", "/account", "/sessions", "/sessions/new"])
def test_pages_send_people_who_are_not_logged_in_to_the_login(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response.headers["Location"] == f"/login?next={url}"


def test_signup_makes_an_account_logs_in_and_shows_the_key_once(client):
    made = client.post("/signup", SIGNUP)
    assert made.status_code == 302 and made["Location"] == "/welcome"  # post/redirect/get
    page = client.get("/welcome")
    assert page.status_code == 200
    html = page.content.decode()
    membership = Membership.objects.get(user__username="dana@example.com")
    assert membership.role == "owner" and membership.tenant.name == "Dana's lab"
    key = ApiKey.objects.get(tenant=membership.tenant)
    assert f'<code id="api-key">{key.prefix}.' in html and "shown only this once" in html
    role = Role.objects.get(tenant=membership.tenant, name="LoopwrightSessionRole")
    assert role.arn in html
    assert page.headers["Cache-Control"].startswith("max-age=0")
    # logged in: the overview opens, and the key is never shown again
    overview = client.get("/overview")
    assert overview.status_code == 200 and key.prefix + "." not in overview.content.decode()
    # a reload of the welcome page shows no key and makes nothing
    again = client.get("/welcome").content.decode()
    assert key.prefix + "." not in again and "was shown once" in again
    assert ApiKey.objects.filter(tenant=membership.tenant).count() == 1
    assert Membership.objects.filter(user__username="dana@example.com").count() == 1


def test_signup_shows_every_problem_at_once(client):
    from controlplane.tenants.models import Tenant

    client.post("/signup", SIGNUP)
    other = type(client)()
    page = other.post(
        "/signup", {"email": "dana@example.com", "password": "12345678901", "tenant_name": " "}
    )
    assert page.status_code == 400
    html = page.content.decode()
    for field in ("email", "password", "tenant_name"):
        assert f'id="id_{field}_error"' in html, field
    assert "already has an account" in html and "entirely numeric" in html and "required" in html
    assert "password:" not in html and "email:" not in html  # the labels name the fields
    assert Tenant.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"email": "not-an-email"}, "email", "not a valid email address"),
        ({"password": "short"}, "password", "too short"),
        ({"password": "12345678901234"}, "password", "entirely numeric"),
        ({"tenant_name": "  "}, "tenant_name", "required"),
    ],
)
def test_signup_errors_are_shown_next_to_their_field(client, change, field, message):
    page = client.post("/signup", SIGNUP | change)
    assert page.status_code == 400
    html = page.content.decode()
    assert f'id="id_{field}_error"' in html and message in html
    assert f'aria-describedby="id_{field}' in html and 'aria-invalid="true"' in html
    assert not Tenant.objects.filter(name="Dana's lab").exists()


def test_signup_with_a_taken_email_says_so_on_the_email_field(client, alice):
    page = client.post("/signup", SIGNUP | {"email": "ALICE@example.com"})
    assert page.status_code == 400
    assert 'id="id_email_error"' in page.content.decode()
    assert "already has an account" in page.content.decode()
    assert not Tenant.objects.filter(name="Dana's lab").exists()  # nothing half-made


def test_login_and_the_next_page(client, alice):
    page = client.post(
        "/login", {"email": "alice@example.com", "password": PASSWORD, "next": "/sessions?x=1"}
    )
    assert page.status_code == 302 and page.headers["Location"] == "/sessions?x=1"
    assert client.get("/account").status_code == 200
    from controlplane.audit.models import AuditEvent

    event = AuditEvent.objects.get(tenant=alice.tenant, action="auth:Login")
    assert event.principal.endswith(":user/alice@example.com") and event.allowed


@pytest.mark.parametrize(
    "next_url", ["https://evil.example/", "//evil.example/", "/\\evil.example", "javascript:x"]
)
def test_login_never_sends_anyone_to_another_site(client, alice, next_url):
    page = client.post(
        "/login", {"email": "alice@example.com", "password": PASSWORD, "next": next_url}
    )
    assert page.status_code == 302 and page.headers["Location"] == "/overview"


def test_login_shows_a_wrong_password_in_place_and_throttles(client, alice, settings):
    settings.LOGIN_FAILURE_LIMIT = 2
    for _ in range(2):
        page = client.post("/login", {"email": "alice@example.com", "password": "wrong one!"})
        assert page.status_code == 401
        assert 'id="id_password_error"' in page.content.decode()
        assert "email or password is wrong" in page.content.decode()
    assert Throttle.objects.count() == 2  # the account from this address, and the address
    throttled = client.post("/login", {"email": "alice@example.com", "password": PASSWORD})
    assert throttled.status_code == 429 and int(throttled.headers["Retry-After"]) > 0
    assert "too many failed logins" in throttled.content.decode()
    assert client.get("/overview").status_code == 302  # still not logged in


def test_login_keeps_the_next_page_in_the_form(client):
    html = client.get("/login?next=/sessions/new").content.decode()
    assert 'name="next" value="/sessions/new"' in html
    assert 'name="next"' not in client.get("/login?next=https://evil.example").content.decode()


def test_logout_is_a_post(alice):
    assert alice.get("/logout").status_code == 405
    assert alice.post("/logout").headers["Location"] == "/"
    assert alice.get("/overview").status_code == 302


def test_account_page_shows_profile_and_memberships(alice, charlie):
    membership_add(tenant=charlie.tenant, user=alice.user, role="member")
    html = alice.get("/account").content.decode()
    assert "alice@example.com" in html
    assert alice.tenant.account_id in html and charlie.tenant.account_id in html
    assert "Owner" in html and "Member" in html
    assert 'id="account-switch"' in html  # the layout's switcher, with two accounts


def test_password_change_errors_are_shown_in_place(alice):
    page = alice.post(
        "/account",
        {"old_password": "not it", "new_password1": "short", "new_password2": "short"},
    )
    assert page.status_code == 400
    html = page.content.decode()
    assert 'id="id_old_password_error"' in html and 'id="id_new_password2_error"' in html
    assert "too short" in html


def test_password_change_keeps_this_login(alice):
    new = "a brand new passphrase"
    page = alice.post(
        "/account", {"old_password": PASSWORD, "new_password1": new, "new_password2": new}
    )
    assert page.status_code == 302 and page.headers["Location"] == "/account"
    after = alice.get("/account")  # the same login goes on
    assert after.status_code == 200 and "password is changed" in after.content.decode()
    assert Client().login(username="alice@example.com", password=new)
    from controlplane.audit.models import AuditEvent

    changed = AuditEvent.objects.filter(action="auth:ChangePassword")
    assert [e.tenant_id for e in changed] == [alice.tenant.id]  # in her account, not charlie's


def test_switching_accounts_changes_whose_things_pages_show(alice, charlie):
    membership_add(tenant=charlie.tenant, user=alice.user, role="member")
    assert "acme" in alice.get("/overview").content.decode()
    switched = alice.post("/account/switch", {"account_id": charlie.tenant.account_id})
    assert switched.status_code == 302 and switched.headers["Location"] == "/overview"
    page = alice.get("/overview").content.decode()
    assert "<h1>other</h1>" in page


def test_switching_to_an_account_of_someone_else_is_not_found(alice, charlie):
    page = alice.post("/account/switch", {"account_id": charlie.tenant.account_id})
    assert page.status_code == 404
    assert "<h1>acme</h1>" in alice.get("/overview").content.decode()
    assert alice.get("/account/switch").status_code == 405
