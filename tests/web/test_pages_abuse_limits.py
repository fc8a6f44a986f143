"""The dashboard's sign-up and login forms are throttled as the API is: sign-ups per address
(429 with Retry-After, while another address still signs up), login failures per account and
address, so the right password from another address logs in."""

from __future__ import annotations

from django.test import Client

from tests.people import PASSWORD


def _signup(n: int, address: str):
    return Client(REMOTE_ADDR=address).post(
        "/signup",
        {"email": f"user{n}@example.com", "password": PASSWORD, "tenant_name": f"lab {n}"},
    )


def test_signup_form_is_limited_per_address(db, settings) -> None:
    settings.SIGNUP_ADDRESS_LIMIT = 2
    assert [_signup(n, "10.0.0.1").status_code for n in range(2)] == [302, 302]
    refused = _signup(2, "10.0.0.1")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "too many sign-ups from this address" in refused.content.decode()
    assert _signup(3, "10.0.0.2").status_code == 302


def test_login_form_lets_the_right_password_in_from_another_address(alice, settings) -> None:
    settings.LOGIN_FAILURE_LIMIT = 2
    guesser = Client(REMOTE_ADDR="10.0.0.1")
    for _ in range(2):
        wrong = guesser.post("/login", {"email": "alice@example.com", "password": "guess"})
        assert wrong.status_code == 401
    refused = guesser.post("/login", {"email": "alice@example.com", "password": PASSWORD})
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    owner = Client(REMOTE_ADDR="10.0.0.2")
    r = owner.post("/login", {"email": "alice@example.com", "password": PASSWORD})
    assert r.status_code == 302 and owner.get("/overview").status_code == 200
