"""Password logins and sign-ups, throttled so that they stop the attacker, not the user: every
attempt takes a drop from its buckets *before* the password is checked (``throttles``), per
account and address and per address, so a burst of parallel guesses is capped at the limit and
the right password from another address always works; sign-ups per address and in all."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate

from controlplane.errors import DomainError, Throttled, Unauthenticated

from . import throttles
from .signals import own_login_event

LOGIN_PAIR = "login-account-address"
LOGIN_ADDRESS = "login-address"
SIGNUP_ADDRESS = "signup-address"
SIGNUP_ALL = "signup-all"


def _take(kind: str, subject: str, limit: int, window: float, what: str) -> None:
    wait = throttles.take(kind, subject, limit=limit, window=window)
    if wait is not None:
        raise Throttled(f"{what}; try again in {wait} seconds", retry_after=wait)


def login_check(*, email: str, password: str, source_ip: str | None):
    """The user for these credentials; 429 once the account's failures from this address, or
    the address's failures, reach their limit (the password is then not checked at all)."""
    email = (email or "").strip().lower()
    if not email or not password:
        raise DomainError(
            "email and password are required", field="email" if not email else "password"
        )
    window = settings.LOGIN_FAILURE_WINDOW_SECONDS
    pair = f"{email}|{source_ip or ''}"
    limit = settings.LOGIN_FAILURE_LIMIT
    _take(LOGIN_PAIR, pair, limit, window, f"too many failed logins of {email} from this address")
    if source_ip:
        try:
            _take(
                LOGIN_ADDRESS,
                source_ip,
                settings.LOGIN_ADDRESS_FAILURE_LIMIT,
                window,
                "too many failed logins from this address",
            )
        except Throttled:
            throttles.give_back(LOGIN_PAIR, pair)
            raise
    user = authenticate(username=email, password=password)
    if user is None:  # the drops stay taken: they count this failure
        raise Unauthenticated("email or password is wrong", field="password")
    throttles.clear(LOGIN_PAIR, pair)
    if source_ip:
        throttles.give_back(LOGIN_ADDRESS, source_ip)
    own_login_event.send(
        sender=login_check,
        user=user,
        action="auth:Login",
        reason="signed in with a password",
        source_ip=source_ip,
    )
    return user


def signup_check(*, source_ip: str | None) -> None:
    """Count one sign-up (call it once the fields are well formed, before the email is looked
    up): 429 past ``LOOPWRIGHT_SIGNUP_ADDRESS_LIMIT`` from one address or
    ``LOOPWRIGHT_SIGNUP_LIMIT`` in all within ``LOOPWRIGHT_SIGNUP_WINDOW`` seconds."""
    window = settings.SIGNUP_WINDOW_SECONDS
    if source_ip:
        _take(
            SIGNUP_ADDRESS,
            source_ip,
            settings.SIGNUP_ADDRESS_LIMIT,
            window,
            "too many sign-ups from this address",
        )
    try:
        _take(SIGNUP_ALL, "", settings.SIGNUP_LIMIT, window, "too many sign-ups right now")
    except Throttled:
        if source_ip:
            throttles.give_back(SIGNUP_ADDRESS, source_ip)
        raise
