"""The "Try it" box in a real browser: its script (a static file, allowed by the CSP) shows the
schema only for a JSON-schema answer and the logprob options only when asked, and refuses what
the API would refuse before anything is sent; a screenshot for people to look at."""

from __future__ import annotations

import pytest
from django.db import transaction

from controlplane.fleet.services import worker_register
from tests.fleet import registration
from tests.people import PASSWORD
from tests.support.pages import BASE_MODEL

from .browser import browser_page, screenshot, sign_in
from .test_pages_sessions import new_session

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_try_box_in_a_browser(live_server, alice) -> None:
    with transaction.atomic():  # as the worker's registration and the model's creation run
        worker_register(**registration("gpu0", BASE_MODEL))
        session, model = new_session(alice)
    url = live_server.url
    with browser_page() as page:
        sign_in(page, url, alice.user.email, PASSWORD)
        page.goto(f"{url}/sessions/{session.id}#try-head")
        box = "form[data-try]"
        assert page.is_hidden(f"{box} [data-try-schema]")
        assert page.is_hidden(f"{box} [data-try-logprobs] >> nth=0")
        page.select_option(f"{box} select[name=response_format]", "json_schema")
        assert page.is_visible(f"{box} [data-try-schema]")
        page.check(f"{box} input[name=logprobs]")
        assert page.is_visible(f"{box} [data-try-logprobs] >> nth=0")
        page.select_option(f"{box} select[name=model]", model.id)
        page.fill(f"{box} textarea[name=messages]", "Name a colour.")
        page.fill(f"{box} input[name=min_p]", "1.5")  # the API takes 0 to 1
        page.fill(f"{box} textarea[name=logit_bias]", "[1, 2]")  # not a JSON object
        page.fill(f"{box} textarea[name=json_schema]", '{"type": "object"}')
        page.click(f"{box} button[type=submit]")
        assert page.url.endswith(f"/sessions/{session.id}#try-head")  # nothing was sent
        assert page.eval_on_selector(f"{box} input[name=min_p]", "e => !e.validity.valid")
        message = page.eval_on_selector(
            f"{box} textarea[name=logit_bias]", "e => e.validationMessage"
        )
        assert "JSON object" in message
        screenshot(page, "session-try-box")
