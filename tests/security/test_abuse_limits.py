"""Sign-up and login limits stop the attacker, not the user, on a live stack started as ``make
serve`` starts it (its default limits): sign-ups from one address are refused with 429 and
Retry-After well before 30 a minute while another address signs up; of 40 parallel wrong
guesses of one account from one address at most the limit are even checked, and the right
password from another address logs in, through the API and the dashboard's forms."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from .served import PASSWORD, Served, browser, csrf

pytestmark = pytest.mark.e2e

SIGNUP_ADDRESS_LIMIT = 10  # the defaults (docs/security.md, "Abuse limits")
LOGIN_FAILURE_LIMIT = 5


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    running = Served(tmp_path_factory.mktemp("abuse-limits")).start()
    try:
        yield running
    finally:
        running.stop()


def _signup(client, n: int, prefix: str):
    return client.post(
        "/api/v1/auth/signup",
        json={"email": f"{prefix}{n}@example.com", "password": PASSWORD, "tenant_name": f"t{n}"},
    )


def test_signups_from_one_address_are_refused_while_others_sign_up(served) -> None:
    started, statuses = time.monotonic(), []
    with served.client("127.0.0.61") as client:
        for n in range(SIGNUP_ADDRESS_LIMIT + 2):
            r = _signup(client, n, "burst")
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) > 0
                assert "too many sign-ups from this address" in r.json()["detail"]
    assert time.monotonic() - started < 60  # all within a minute
    assert statuses == [201] * SIGNUP_ADDRESS_LIMIT + [429, 429]
    with served.client("127.0.0.62") as other:
        assert _signup(other, 0, "other").status_code == 201


def test_the_signup_form_is_refused_the_same_way(served) -> None:
    with served.client("127.0.0.63", follow_redirects=False) as form:
        statuses = []
        for n in range(SIGNUP_ADDRESS_LIMIT + 1):
            form.cookies.clear()  # a new visitor each time, from the same address
            data = {
                "email": f"form{n}@example.com",
                "password": PASSWORD,
                "tenant_name": f"lab {n}",
                "csrfmiddlewaretoken": csrf(form, "/signup"),
            }
            r = form.post("/signup", data=data)
            statuses.append(r.status_code)
        assert statuses == [302] * SIGNUP_ADDRESS_LIMIT + [429]
        assert int(r.headers["retry-after"]) > 0 and "too many sign-ups" in r.text


def test_parallel_guesses_are_capped_and_the_owner_still_logs_in(served) -> None:
    served.signup("alice", "127.0.0.71")
    start, statuses = threading.Barrier(40), []

    def guess(n: int) -> None:
        with served.client("127.0.0.72") as client:
            start.wait()
            r = client.post(
                "/api/v1/auth/login",
                json={"email": "alice@example.com", "password": f"guess number {n}"},
            )
            statuses.append(r.status_code)

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counted = Counter(statuses)
    assert counted[401] <= LOGIN_FAILURE_LIMIT and counted[401] + counted[429] == 40, counted
    with served.client("127.0.0.72") as guesser:  # the right password, from the guesser: refused
        r = guesser.post(
            "/api/v1/auth/login", json={"email": "alice@example.com", "password": PASSWORD}
        )
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    with served.client("127.0.0.73") as owner:  # ... and from anywhere else: logged in
        r = owner.post(
            "/api/v1/auth/login", json={"email": "alice@example.com", "password": PASSWORD}
        )
        assert r.status_code == 200 and r.json()["accounts"][0]["role"] == "owner"
    dashboard = browser(served, "127.0.0.74", "alice@example.com")  # the login form too
    try:
        assert dashboard.get("/overview").status_code == 200
    finally:
        dashboard.close()
    with served.client("127.0.0.72", follow_redirects=False) as guesser:
        data = {"email": "alice@example.com", "password": PASSWORD}
        r = guesser.post("/login", data=data | {"csrfmiddlewaretoken": csrf(guesser, "/login")})
        assert r.status_code == 429
