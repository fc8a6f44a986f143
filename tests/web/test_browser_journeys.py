"""The fixes a demanding first user asked for, walked through in Chromium: secrets shown once
survive a reload without making anything, the forms refuse what the API refuses, the session page
(operations, curves, failovers, Stop), the audit log's outcomes, the policy editor and simulator,
prices, and what a billing viewer is offered. A screenshot of each step."""

from __future__ import annotations

import json
import re

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.iam.models import ApiKey
from controlplane.tenants.models import Invitation, Tenant
from controlplane.training_sessions.models import Session
from tests.people import PASSWORD

from .browser import browser_page, screenshot, sign_in
from .seed_pages import seed_pages

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_what_is_shown_once_survives_a_reload_and_makes_nothing(live_server) -> None:
    url = live_server.url
    with browser_page() as page:
        page.goto(f"{url}/signup")
        page.fill("#id_email", "not-an-email")
        page.fill("#id_password", "12345678901")
        page.fill("#id_tenant_name", " ")
        page.click("button:has-text('Create account')")
        for field in ("email", "password", "tenant_name"):  # every problem at once
            assert page.locator(f"#id_{field}_error").is_visible(), field
        screenshot(page, "journey-signup-errors")
        page.fill("#id_email", "dana@example.com")
        page.fill("#id_password", PASSWORD)
        page.fill("#id_tenant_name", "Dana's lab")
        page.click("button:has-text('Create account')")
        page.wait_for_url(f"{url}/welcome")
        first = page.inner_text("#api-key")
        assert first.startswith("tml-")
        page.reload()
        assert page.locator("#api-key").count() == 0 and "was shown once" in page.inner_text("main")
        assert Tenant.objects.filter(name="Dana's lab").count() == 1
        assert ApiKey.objects.filter(user__username="dana@example.com").count() == 1
        screenshot(page, "journey-welcome-reloaded")

        page.goto(f"{url}/iam/keys")
        page.fill("#id_name", "laptop")
        page.click("form[action='/iam/keys'][method=post] button[type=submit]")
        page.wait_for_selector("#raw-key")
        assert page.inner_text("#raw-key") != first
        page.reload()
        assert page.locator("#raw-key").count() == 0 and "was shown once" in page.inner_text("main")
        assert ApiKey.objects.filter(user__username="dana@example.com").count() == 2
        screenshot(page, "journey-key-reloaded")

        page.goto(f"{url}/iam/users")
        page.fill("#invite_email", "dana@example.com")  # herself: a member already
        assert "already a member" in page.inner_text("#invite-warning")
        page.fill("#invite_email", "erin@example.com")
        assert page.locator("#invite-warning").is_hidden()
        page.click("button:has-text('Create invitation')")
        page.wait_for_selector("#invitation-link")
        page.reload()
        assert page.locator("#invitation-link").count() == 0
        assert Invitation.objects.filter(email="erin@example.com").count() == 1
        page.goto(f"{url}/iam/users")
        assert "erin@example.com" in page.inner_text("#invitations + .table-wrap")
        screenshot(page, "journey-invitations-pending")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Revoke')")
        page.wait_for_selector(".messages li.success")
        assert not Invitation.objects.filter(email="erin@example.com").exists()
        assert "No invitation is waiting" in page.inner_text("main")


def test_the_session_form_and_page(live_server, tmp_path) -> None:
    seeded = seed_pages(tmp_path)
    url = live_server.url
    with browser_page() as page:
        sign_in(page, url, "alice@example.com", PASSWORD)
        page.goto(f"{url}/sessions/new")
        assert "$1.2288" in page.inner_text(".estimate")
        page.fill("[data-in=steps]", "10")
        assert "40,960" in page.inner_text("[data-out=count]")
        before = Session.objects.count()
        for rank, alpha, field, says in (
            ("0", "", "rank", "must be between 1 and 128, got 0"),
            ("100000", "", "rank", "must be between 1 and 128, got 100000"),
            ("8", "-5", "alpha", "must be greater than 0, got -5"),
        ):
            page.fill("#id_rank", rank)
            page.fill("#id_alpha", alpha)
            page.click("button:has-text('Create session')")
            assert says in page.inner_text(f"#id_{field}_error"), (rank, alpha)
        assert Session.objects.count() == before  # nothing made, no slot held
        screenshot(page, "journey-session-form-refused")

        page.goto(f"{url}/sessions/{seeded.session_id}")
        failover = page.inner_text("ol.failovers")
        assert "Worker gpu7 was lost" in failover and "back 4.2 s" in failover
        page.locator("svg[aria-label='Loss per token'] rect.hover").nth(10).hover()
        tip = page.inner_text("figure.chart-box .chart-tip")
        assert tip.startswith("optimizer step 11 · loss per token:"), tip
        screenshot(page, "journey-session-hover")
        page.select_option("#f-smooth", "0.8")
        page.wait_for_url(re.compile(r"smooth=0\.8"))
        assert page.locator("svg[aria-label='Loss per token'] polyline[opacity='0.3']").count() == 1
        # ticking it submits the form at once; the page it loads carries the choice twice (the
        # box, ticked, and the operations filter's hidden copy), so click rather than check()
        page.locator("input[type=checkbox][name=compare]").click()
        page.wait_for_url(re.compile(r"compare=sess-"))
        assert (
            page.locator("svg[aria-label='Loss per token'] polyline[stroke-width='2']").count() == 2
        )
        page.select_option("#f-scale", "log")
        page.wait_for_url(re.compile(r"scale=log"))
        screenshot(page, "journey-session-compare-log")
        page.select_option("#f-kind", "optim_step")
        page.wait_for_url(re.compile(r"kind=optim_step"))
        kinds = page.locator("#session-ops tbody td:first-child").all_inner_texts()
        assert kinds and set(kinds) == {"optimizer step"}
        page.click("#session-ops a:has-text('Older')")
        page.wait_for_url(re.compile(r"page=2"))
        assert "page 2 of 2" in page.inner_text("#session-ops")
        screenshot(page, "journey-session-ops-page-2")
        page.once("dialog", lambda dialog: dialog.dismiss())  # Stop asks first
        page.click("button:has-text('Stop session')")
        assert Session.objects.get(pk=seeded.session_id).state == "active"
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Stop session')")
        page.wait_for_selector(".messages li.success")
        assert Session.objects.get(pk=seeded.session_id).state in ("stopping", "stopped")


def test_audit_editor_simulator_prices_and_a_billing_viewer(live_server, tmp_path) -> None:
    seed_pages(tmp_path)
    url = live_server.url
    with browser_page() as page:
        sign_in(page, url, "alice@example.com", PASSWORD)
        page.goto(f"{url}/iam/keys")
        assert "does not trust you" in page.inner_text("main")
        page.fill("#id_name", "ci")
        page.select_option("#id_owner", "role:LoopwrightSessionRole")
        page.click("form[action='/iam/keys'][method=post] button[type=submit]")
        assert "does not let" in page.inner_text("#id_owner_error")
        page.goto(f"{url}/audit?action=apikey")
        row = page.locator("table.audit tbody tr").first
        assert "failed" in row.inner_text() and "trust policy" in row.inner_text()
        assert "Only changes are listed" in page.inner_text("main")
        screenshot(page, "journey-audit-failed-change")
        failed = AuditEvent.objects.get(action="iam:CreateApiKey", outcome="failed")
        assert failed.allowed

        page.goto(f"{url}/iam/roles/Deployer/policies/new")
        page.fill("input[name=policy_name]", "readers")
        bad = {"Version": "2012-10-17", "Statement": [
            {"Sid": "Read", "Effect": "Allow", "Action": "registry:List*", "Resource": "*"},
            {"Sid": "Typo", "Effect": "Alow", "Action": "kms:ListKeys", "Resource": "*"}]}  # fmt: skip
        text = json.dumps(bad, indent=2)
        line = next(i for i, t in enumerate(text.splitlines(), 1) if "Alow" in t)
        page.fill("textarea[name=document]", text)
        page.click("form.stacked button[type=submit]")
        page.wait_for_selector("#id_document_error")
        assert page.inner_text(".gutter li.marked") == str(line)
        assert f"Line {line}" in page.inner_text("#id_document_error")
        screenshot(page, "journey-policy-error-line")
        page.focus("textarea[name=document]")
        page.keyboard.press("End")
        page.keyboard.type(" ")
        assert page.locator(".gutter li.marked").count() == 0  # changed: the mark goes

        page.goto(f"{url}/iam/simulator")
        page.fill("[data-action-search]", "apikey")
        visible = [o for o in page.locator(".action-option").all() if o.is_visible()]
        assert {o.locator("code").inner_text() for o in visible} == {
            "iam:CreateApiKey", "iam:ListApiKeys", "iam:RevokeApiKey"}  # fmt: skip
        page.check("input[value='iam:CreateApiKey']")
        page.check("input[value='iam:RevokeApiKey']")
        assert page.inner_text("[data-picked-count]") == "2"
        page.fill("#id_resource", "not-an-arn")
        page.click("button:has-text('Simulate')")
        assert "not an ARN" in page.inner_text("main form")
        page.fill("#id_resource", "*")
        page.click("button:has-text('Simulate')")
        assert "2 of 2 allowed" in page.inner_text("section.decisions")
        screenshot(page, "journey-simulator")

        page.goto(f"{url}/billing")
        prices = page.inner_text("table.prices")
        assert "Training tokens" in prices and "$0.30" in prices
        screenshot(page, "journey-prices")

    with browser_page() as viewer:
        sign_in(viewer, url, "vera@example.com", PASSWORD)
        menu = viewer.inner_text("nav[aria-label=Main]")
        assert "IAM" not in menu and "Audit" not in menu and "Billing" in menu
        assert viewer.locator("button:has-text('New session')").is_disabled()
        assert "sessions:CreateTrainingSession" in viewer.inner_text("main")
        screenshot(viewer, "journey-billing-viewer-overview")
        viewer.goto(f"{url}/iam/roles")
        assert "do not let you do this" in viewer.inner_text("main")
        assert not viewer.locator("details").first.evaluate("d => d.open")  # the dump is folded
        screenshot(viewer, "journey-billing-viewer-refused")
