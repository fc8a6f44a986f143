"""Sign-ups and logins are throttled so that they stop the attacker, not the user: per address
and in all for sign-ups; per account and address, and per address, for login failures, counted
before the password is checked, atomically (parallel guesses on PostgreSQL never pass more than
the limit), so the right password from another address always works."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from controlplane.tenants import throttles
from controlplane.tenants.services import signup

PASSWORD = "a long passphrase 42"


def _signup(n: int, address: str):
    return APIClient(REMOTE_ADDR=address).post(
        "/api/v1/auth/signup",
        {"email": f"user{n}@example.com", "password": PASSWORD, "tenant_name": f"t{n}"},
        format="json",
    )


def _login(address: str, password: str):
    return APIClient(REMOTE_ADDR=address).post(
        "/api/v1/auth/login", {"email": "e@example.com", "password": password}, format="json"
    )


@pytest.mark.django_db
def test_signups_are_limited_per_address_and_in_all(settings) -> None:
    settings.SIGNUP_ADDRESS_LIMIT, settings.SIGNUP_LIMIT = 3, 5
    for n in range(3):
        assert _signup(n, "10.0.0.1").status_code == 201
    refused = _signup(3, "10.0.0.1")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "too many sign-ups from this address" in refused.json()["detail"]
    taken = APIClient(REMOTE_ADDR="10.0.0.2").post(
        "/api/v1/auth/signup",
        {"email": "user0@example.com", "password": PASSWORD, "tenant_name": "x"},
        format="json",
    )
    assert taken.status_code == 409  # another address: within its limit, told the truth
    assert _signup(4, "10.0.0.3").status_code == 201
    refused = _signup(5, "10.0.0.4")  # the sixth sign-up in all
    assert refused.status_code == 429 and "too many sign-ups right now" in refused.json()["detail"]


@pytest.mark.django_db
def test_the_right_password_from_another_address_works(settings) -> None:
    settings.LOGIN_FAILURE_LIMIT = 3
    signup(email="e@example.com", password=PASSWORD, tenant_name="t")
    for _ in range(3):
        assert _login("10.0.0.1", "wrong guess").status_code == 401
    refused = _login("10.0.0.1", PASSWORD)  # not even checked
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert _login("10.0.0.2", PASSWORD).status_code == 200
    assert _login("10.0.0.1", PASSWORD).status_code == 429  # still, from the guessing address


@pytest.mark.django_db
def test_an_address_guessing_many_accounts_is_stopped(settings) -> None:
    settings.LOGIN_FAILURE_LIMIT, settings.LOGIN_ADDRESS_FAILURE_LIMIT = 3, 4
    for n in range(4):
        r = APIClient(REMOTE_ADDR="10.0.0.9").post(
            "/api/v1/auth/login",
            {"email": f"victim{n}@example.com", "password": "guess"},
            format="json",
        )
        assert r.status_code == 401
    r = APIClient(REMOTE_ADDR="10.0.0.9").post(
        "/api/v1/auth/login", {"email": "other@example.com", "password": "guess"}, format="json"
    )
    assert r.status_code == 429 and "from this address" in r.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_parallel_takes_never_pass_more_than_the_limit() -> None:
    """Forty threads, each with its own connection, take from one bucket at once: exactly the
    limit get through (the conditional upsert is one statement)."""
    start, taken = threading.Barrier(40), []

    def attempt() -> None:
        try:
            start.wait()
            if throttles.take("test", "bucket", limit=10, window=900) is None:
                taken.append(1)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 10
