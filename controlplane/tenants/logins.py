"""Password logins for the dashboard, throttled per email and per source address."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import authenticate
from django.db.models import Q
from django.utils import timezone

from controlplane.errors import DomainError, Throttled, Unauthenticated

from .models import LoginFailure
from .signals import own_login_event


def login_check(*, email: str, password: str, source_ip: str | None):
    """The user for these credentials; 429 once too many recent attempts failed."""
    email = (email or "").strip().lower()
    if not email or not password:
        raise DomainError(
            "email and password are required", field="email" if not email else "password"
        )
    window = timedelta(seconds=settings.LOGIN_FAILURE_WINDOW_SECONDS)
    since = timezone.now() - window
    recent = LoginFailure.objects.filter(at__gte=since)
    by_email = recent.filter(email=email)
    by_ip = recent.filter(source_ip=source_ip) if source_ip else LoginFailure.objects.none()
    limit = settings.LOGIN_FAILURE_LIMIT
    # an address may fail for several people (a shared office), so it gets more tries
    if by_email.count() >= limit or by_ip.count() >= 4 * limit:
        oldest = recent.filter(Q(email=email) | Q(source_ip=source_ip)).order_by("at").first()
        wait = window - (timezone.now() - oldest.at) if oldest else window
        raise Throttled(
            "too many failed logins; try again later",
            retry_after=max(1, int(wait.total_seconds())),
        )
    user = authenticate(username=email, password=password)
    if user is None:
        LoginFailure.objects.create(email=email, source_ip=source_ip)
        raise Unauthenticated("email or password is wrong", field="password")
    by_email.delete()
    own_login_event.send(
        sender=login_check,
        user=user,
        action="auth:Login",
        reason="signed in with a password",
        source_ip=source_ip,
    )
    return user


def signup_check(*, source_ip: str | None) -> None:
    """Sign-ups that named an email that already has an account count as failed logins of the
    source address (not of the email: probing must not lock its owner out), so guessing who
    has an account is throttled like guessing passwords: 429 past the address's limit."""
    if not source_ip:
        return
    window = timedelta(seconds=settings.LOGIN_FAILURE_WINDOW_SECONDS)
    recent = LoginFailure.objects.filter(at__gte=timezone.now() - window, source_ip=source_ip)
    if recent.count() >= 4 * settings.LOGIN_FAILURE_LIMIT:
        oldest = recent.order_by("at").first()
        wait = window - (timezone.now() - oldest.at) if oldest else window
        raise Throttled(
            "too many failed sign-ups and logins from this address; try again later",
            retry_after=max(1, int(wait.total_seconds())),
        )


def signup_taken(*, source_ip: str | None) -> None:
    """Record a sign-up refused because its email already has an account."""
    if source_ip:
        LoginFailure.objects.create(email="", source_ip=source_ip)


def login_failures_prune(*, now=None) -> int:
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.LOGIN_FAILURE_WINDOW_SECONDS)
    deleted, _ = LoginFailure.objects.filter(at__lt=cutoff).delete()
    return deleted
