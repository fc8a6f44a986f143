"""A person's first hour, in a real browser against the real stack (PostgreSQL, Redis, gunicorn
serving the static files, a Celery worker on the tiny model): sign up, make an API key, create a
session in the dashboard, train it from a script with the SDK, watch the loss, read the bill,
stop the session. Every page is saved as a screenshot under ``artifacts/screenshots/``."""

from __future__ import annotations

import re
import time

import pytest

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput

from ..e2e.stack import TINY, Stack
from .browser import browser_page, screenshot, too_wide

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

EMAIL, PASSWORD = "dana@example.com", "correct horse battery staple"
TEXTS = ["the cat sat on the mat.", "loopwright trains.", "2 + 2 = 4", "hello, world!"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("web")).start()
    try:
        yield running
    finally:
        running.stop()


def sft_datums(tokenizer) -> list[Datum]:
    out = []
    for text in TEXTS:
        tokens = [tokenizer.bos_token_id, *tokenizer.encode(text, add_special_tokens=False)]
        tokens.append(tokenizer.eos_token_id)
        out.append(
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "weights": [0.0] + [1.0] * (len(tokens) - 2),
                },
            )
        )
    return out


def wait_for(page, url: str, selector: str, text: str, timeout: float = 120) -> None:
    """Reload ``url`` until the first ``selector`` reads ``text``."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(url)
        if page.locator(selector).first.inner_text().strip() == text:
            return
        assert time.monotonic() < deadline, f"{url}: {selector} never read {text!r}"
        time.sleep(1)


def test_sign_up_train_watch_and_stop_in_the_browser(stack) -> None:
    with browser_page() as page:
        # the landing page, styled by our own static files (WhiteNoise under gunicorn)
        page.goto(stack.url + "/")
        assert "Your training loop, our GPUs" in page.inner_text("h1")
        css = page.request.get(stack.url + page.get_attribute("link[rel=stylesheet]", "href"))
        assert css.ok and ".badge" in css.text()
        screenshot(page, "01-landing")

        # sign up: the first key and the session role are shown once
        page.click("text=Sign up")
        page.fill("#id_email", EMAIL)
        page.fill("#id_password", "short")
        page.fill("#id_tenant_name", "Dana's lab")
        page.click("button:has-text('Create account')")
        assert "too short" in page.inner_text("#id_password_error")
        screenshot(page, "02-signup-error")
        page.fill("#id_password", PASSWORD)
        page.click("button:has-text('Create account')")
        assert page.inner_text("h1") == "Welcome to Loopwright"
        first_key = page.inner_text("#api-key")
        role_arn = page.inner_text("#role-arn")
        assert first_key.startswith("tml-") and role_arn.endswith(":role/LoopwrightSessionRole")
        screenshot(page, "03-welcome")

        page.goto(stack.url + "/overview")
        assert "No session yet" in page.inner_text("main")
        screenshot(page, "04-overview-empty")

        # an API key for the script, made in the IAM pages
        page.goto(stack.url + "/iam/keys")
        page.fill("#id_name", "laptop")
        page.click("button:has-text('Create key')")
        api_key = page.inner_text("#raw-key")
        assert api_key.startswith("tml-") and api_key != first_key
        screenshot(page, "05-api-key")

        # a session, made in the dashboard
        page.goto(stack.url + "/sessions/new")
        page.select_option("#id_base_model", TINY)
        page.fill("#id_name", "browser-run")
        page.fill("#id_subnets", "subnet-xyz")
        page.fill("#id_security_group_ids", "sg-0123456789")
        page.click("button:has-text('Create session')")
        assert "is not a subnet id" in page.inner_text("#id_subnets_error")
        screenshot(page, "06-session-form-error")
        page.fill("#id_subnets", "")
        page.fill("#id_security_group_ids", "")
        page.fill("#id_rank", "8")
        page.fill("#id_alpha", "16")
        assert page.input_value("#id_role_arn") == role_arn
        page.click("button:has-text('Create session')")
        session_id = re.search(r"/sessions/(sess-[0-9a-f]+)$", page.url).group(1)
        wait_for(page, page.url, ".card.model .badge", "ready")
        model_id = re.search(r"model-[0-9a-f]+", page.inner_text("main")).group(0)
        screenshot(page, "07-session-ready")

        # the script trains it: forward_backward and optim_step, a few times
        with ServiceClient(base_url=stack.url, api_key=api_key, role_arn=role_arn) as svc:
            training_client = svc.create_training_client(model_id)
            datums = sft_datums(training_client.get_tokenizer())
            losses = []
            for _ in range(5):
                fwd_bwd = training_client.forward_backward(datums, loss_fn="cross_entropy")
                optim = training_client.optim_step(AdamParams(learning_rate=1e-2))
                losses.append(fwd_bwd.result().metrics["loss:sum"])
                optim.result()
            assert all(loss > 0 for loss in losses), losses  # learning itself is tested elsewhere

            # the session page shows them, and the loss curve
            page.goto(f"{stack.url}/sessions/{session_id}")
            main = page.inner_text("main")
            assert main.count("forward + backward") >= 5 and main.count("optimizer step") >= 5
            assert page.locator("svg[aria-label='Loss per token'] polyline").count() == 1
            assert page.locator("svg[aria-label='Loss per token'] circle").count() == 5
            screenshot(page, "08-session-trained")

            # the list refreshes itself while the session is live
            page.goto(stack.url + "/sessions")
            assert page.get_attribute("#session-list", "data-refresh") == "/sessions"
            assert "browser-run" in page.inner_text("#session-list")
            screenshot(page, "09-sessions")

            page.goto(stack.url + "/overview")
            overview = page.inner_text("main")
            assert "browser-run" in overview and "Tokens this month" in overview
            screenshot(page, "10-overview")

            # the bill: the tokens it trained, and their cost
            billing = page.goto(stack.url + "/billing")
            if billing.ok:
                assert "Training tokens" in page.inner_text("main")
                screenshot(page, "11-billing")

            # stop it in the dashboard
            page.goto(f"{stack.url}/sessions/{session_id}")
            page.once("dialog", lambda dialog: dialog.accept())  # it asks first
            page.click("button:has-text('Stop session')")
            assert re.search(r"is (stopping|stopped)", page.inner_text(".messages"))
            wait_for(page, page.url, "#session-live .badge", "stopped")
            assert page.locator("button:has-text('Stop session')").count() == 0
            screenshot(page, "12-session-stopped")

        page.goto(stack.url + "/account")
        screenshot(page, "13-account")
        page.goto(stack.url + "/status")
        assert TINY in page.inner_text("main")
        screenshot(page, "14-status")

    # a phone: log in again and read the session
    with browser_page(width=390, height=844) as phone:
        phone.goto(f"{stack.url}/sessions/{session_id}")
        assert "/login?next=" in phone.url
        screenshot(phone, "15-phone-login")
        phone.fill("#id_email", EMAIL)
        phone.fill("#id_password", PASSWORD)
        phone.click("button:has-text('Log in')")
        assert phone.url.endswith(f"/sessions/{session_id}")
        phone.wait_for_load_state("load")  # the URL changes when the page starts to arrive
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        assert not too_wide(phone)  # the loss chart inside its box, the tables as cards
        screenshot(phone, "16-phone-session")
        phone.goto(stack.url + "/overview")
        screenshot(phone, "17-phone-overview")
