"""Refusals as people meet them: a form the caller may not submit is refused in plain words before
it is filled in; one refused submit is one audit row naming the refused action; input a form names
that is not there comes back as the form (400) with the reason under its field; downloads are
reads in the audit log; the invite route and the favicon answer a browser's GET."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.iam.access import is_mutating
from controlplane.iam.services import user_policy_put
from controlplane.tenants.models import Membership
from controlplane.training_sessions.models import Session
from tests.support.pages import member

from .test_pages_sessions import form

pytestmark = pytest.mark.django_db

CREATE = "sessions:CreateTrainingSession"


def rows(client) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(tenant=client.tenant).order_by("id"))


def test_a_billing_viewer_is_refused_the_new_session_form_in_plain_words(alice, charlie, worker):
    vera = member("vera", alice, Membership.Role.BILLING_VIEWER)
    AuditEvent.objects.all().delete()
    page = vera.get("/sessions/new")
    html = page.content.decode()
    assert page.status_code == 403
    assert "Your permissions in" in html and f"<code>{CREATE}</code>" in html
    assert "a billing viewer of this account" in html
    assert 'action="/sessions/new"' not in html  # no form that could only be refused
    assert rows(vera) == []  # looking is not trying: nothing recorded

    refused = vera.post("/sessions/new", form(vera, name="vera-run"))
    html = refused.content.decode()
    assert refused.status_code == 403 and "Your permissions in" in html
    assert 'class="errorlist' not in html  # the refusal is the page, not a form error
    assert not Session.objects.filter(name="vera-run").exists()
    [row] = rows(vera)
    assert (row.action, row.allowed, row.mutating) == (CREATE, False, True)
    # charlie, in another account, sees nothing of acme's refusal
    assert charlie.get("/audit").content.decode().count("vera@example.com") == 0


def test_one_refused_submit_is_one_audit_row_naming_the_refused_action(alice, worker):
    deny_models = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Action": "sessions:CreateModel", "Resource": "*"}],
    }
    user_policy_put(membership=alice.membership, name="no-models", document=deny_models)
    AuditEvent.objects.all().delete()
    page = alice.post("/sessions/new", form(alice, name="denied"))
    assert page.status_code == 403 and "sessions:CreateModel" in page.content.decode()
    [row] = rows(alice)
    assert (row.action, row.allowed, row.effect) == ("sessions:CreateModel", False, "ExplicitDeny")
    assert not Session.objects.filter(name="denied").exists()
    assert "PassRole" not in "".join(r.action + r.error for r in rows(alice))


def test_a_service_refusal_is_one_failed_row_and_a_success_records_every_decision(alice, worker):
    AuditEvent.objects.all().delete()
    page = alice.post("/sessions/new", form(alice, name="too-many", replicas="999"))
    assert page.status_code == 400 and 'id="id_replicas_error"' in page.content.decode()
    [row] = [r for r in rows(alice) if r.mutating]
    assert (row.action, row.allowed, row.outcome) == (CREATE, True, AuditEvent.Outcome.FAILED)
    assert "replicas" in row.error

    AuditEvent.objects.all().delete()
    made = alice.post("/sessions/new", form(alice, name="fine"))
    assert made.status_code == 302
    written = [(r.action, r.outcome) for r in rows(alice) if r.mutating]
    assert written == [
        (CREATE, AuditEvent.Outcome.SUCCEEDED),
        ("iam:PassRole", AuditEvent.Outcome.SUCCEEDED),
        ("sessions:CreateModel", AuditEvent.Outcome.SUCCEEDED),
    ]


def test_input_that_is_not_there_comes_back_as_the_form_with_400(alice, charlie):
    # a budget on a session that does not exist: the form again, the reason under the field
    body = {"name": "nightly", "scope": "session", "scope_value": "sess-nope", "unit": "usd",
            "period": "month", "amount": "5", "thresholds": "80"}  # fmt: skip
    page = alice.post("/billing/budgets", body)
    html = page.content.decode()
    assert page.status_code == 400, page.status_code
    assert 'id="id_scope_value_error"' in html or "no session 'sess-nope'" in html
    assert "no session &#x27;sess-nope&#x27; in this account" in html
    assert 'action="/billing/budgets"' in html
    # charlie's own session id is not there for alice either
    from controlplane.training_sessions.services.sessions import session_create

    theirs = session_create(tenant=charlie.tenant, name="c", platform={})
    page = alice.post("/billing/budgets", body | {"scope_value": theirs.id})
    assert page.status_code == 400 and "in this account" in page.content.decode()


def test_the_invite_route_shows_the_invite_form_and_the_favicon_is_served(alice, client):
    page = alice.get("/iam/users/invite")
    assert page.status_code == 302 and page["Location"] == "/iam/users#invite"
    assert 'id="invite"' in alice.get(page["Location"]).content.decode()
    assert client.get("/iam/users/invite").status_code == 302  # to the login, signed out
    html = alice.get("/overview").content.decode()
    assert '<link rel="icon" href="/static/web/favicon.svg" type="image/svg+xml">' in html
    icon = client.get("/static/web/favicon.svg")
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content)
    assert client.get("/favicon.ico")["Location"] == "/static/web/favicon.svg"


def test_downloads_and_a_keys_use_are_reads_changes_are_writes() -> None:
    assert not is_mutating("registry:DownloadModelPackage")
    assert not is_mutating("kms:Decrypt") and not is_mutating("kms:GenerateDataKey")
    assert not is_mutating("sessions:GetCheckpointDownloadLinks")
    for change in ("registry:DeleteModelPackage", "kms:DisableKey", "iam:PassRole", CREATE):
        assert is_mutating(change), change
