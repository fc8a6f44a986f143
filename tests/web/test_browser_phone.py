"""Every dashboard page on a 390px phone, in light and in dark: nothing wider than the screen (no
sideways scrolling, charts inside their box, tables stacked), and a screenshot of each page, on
a desktop too, for people to look at."""

from __future__ import annotations

import pytest

from tests.people import PASSWORD

from .browser import browser_page, screenshot, sign_in, too_wide
from .seed_pages import seed_pages

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def pages(seeded) -> list[tuple[str, str]]:
    """(name, path) of every page a signed-in owner can open."""
    return [
        ("overview", "/overview"),
        ("sessions", "/sessions"),
        ("session-new", "/sessions/new"),
        ("session", f"/sessions/{seeded.session_id}"),
        ("session-compare", f"/sessions/{seeded.session_id}?smooth=0.8&scale=log&compare="
         + next_run(seeded)),
        ("registry", "/registry"),
        ("registry-group", "/registry/groups/my-rl"),
        ("registry-version", "/registry/groups/my-rl/versions/2"),
        ("iam-roles", "/iam/roles"),
        ("iam-role", "/iam/roles/Deployer"),
        ("iam-trust", "/iam/roles/LoopwrightSessionRole/trust-policy?template=members"),
        ("iam-policy-new", "/iam/roles/Deployer/policies/new"),
        ("iam-users", "/iam/users"),
        ("iam-user", "/iam/users/bob@example.com"),
        ("iam-invitation", f"/iam/users/invitations/{seeded.invitation_id}"),
        ("iam-keys", "/iam/keys"),
        ("iam-access-keys", "/iam/access-keys"),
        ("iam-simulator", "/iam/simulator?principal=user%3Abob%40example.com"
         "&action=iam%3ACreateRole&action=registry%3AListModelPackages&resource=*"),
        ("kms", "/kms"),
        ("kms-key", f"/kms/keys/{seeded.key_id}"),
        ("vpc", "/vpc"),
        ("billing", "/billing?start=2025-03-01&end=2025-03-31"),
        ("budgets", "/billing/budgets"),
        ("budget", "/billing/budgets/team-month"),
        ("audit", "/audit"),
        ("account", "/account"),
        ("status", "/status"),
        ("welcome", "/welcome"),
    ]  # fmt: skip


def next_run(seeded) -> str:
    from controlplane.training_sessions.models import Session

    return Session.objects.get(name="sweep lr 1e-4").id


def test_every_page_fits_a_phone_in_light_and_dark(live_server, tmp_path) -> None:
    seeded = seed_pages(tmp_path)
    url = live_server.url
    problems: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        with browser_page(width=390, height=844, color_scheme=scheme) as phone:
            for name, path in [("landing", "/"), ("login", "/login"), ("signup", "/signup")]:
                phone.goto(f"{url}{path}")
                problems[f"{name} {scheme}"] = too_wide(phone)
                screenshot(phone, f"phone-{scheme}-{name}")
            sign_in(phone, url, "alice@example.com", PASSWORD)
            for name, path in pages(seeded):
                response = phone.goto(f"{url}{path}")
                assert response.ok, (path, response.status)
                problems[f"{name} {scheme}"] = too_wide(phone)
                screenshot(phone, f"phone-{scheme}-{name}")
            if scheme == "dark":  # the system's setting is followed, without a switch of ours
                background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
                assert background == "rgb(13, 17, 23)", background
            else:
                background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
                assert background == "rgb(255, 255, 255)", background
            # the session page's loss chart is drawn inside its box
            phone.goto(f"{url}/sessions/{seeded.session_id}")
            box = phone.locator("figure.chart-box").first.bounding_box()
            chart = phone.locator("figure.chart-box svg.chart").first.bounding_box()
            assert (
                chart["x"] >= box["x"]
                and chart["x"] + chart["width"] <= box["x"] + box["width"] + 0.5
            )
            assert box["x"] + box["width"] <= 390
    wide = {page: found for page, found in problems.items() if found}
    assert not wide, wide


def test_every_page_on_a_desktop(live_server, tmp_path) -> None:
    seeded = seed_pages(tmp_path)
    url = live_server.url
    with browser_page() as page:
        sign_in(page, url, "alice@example.com", PASSWORD)
        for name, path in pages(seeded):
            response = page.goto(f"{url}{path}")
            assert response.ok, (path, response.status)
            assert "None" not in page.inner_text("main"), path  # friendly values only
            screenshot(page, f"desktop-{name}")
    with browser_page(color_scheme="dark") as page:
        sign_in(page, url, "alice@example.com", PASSWORD)
        for name in ("session", "billing", "iam-policy-new"):
            page.goto(f"{url}{dict(pages(seeded))[name]}")
            screenshot(page, f"desktop-dark-{name}")
