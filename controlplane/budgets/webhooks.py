"""Alert webhooks: a URL's check, the signed request (``Loopwright-Signature: t=<unix time>,
v1=<hex HMAC-SHA256 of "<t>.<body>">``, which a receiver checks and refuses when ``t`` is old),
and delivery by housekeeping, each claimed before its attempt and retried with backoff."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import socket
import time
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.kms.keyring import TamperedError

from .models import WebhookDelivery
from .webhook_secrets import secret_open

log = logging.getLogger("loopwright.budgets")

MAX_URL = 2048
SEND_LIMIT = 100  # deliveries attempted per run at most
TOLERANCE_SECONDS = 300  # what receivers should accept between ``t`` and their clock
SIGNATURE_HEADER = "Loopwright-Signature"
UNSENT = (WebhookDelivery.Status.PENDING, WebhookDelivery.Status.FAILED)


class WebhookRefused(Exception):
    """A URL this service will not send to (a private address, an unresolvable host)."""


def url_checked(url: object, *, field: str = "webhook_url") -> str:
    """``url`` if deliveries may be sent to it: http(s), a host, no user or password, at most
    2,048 characters, and (unless ``BUDGET_WEBHOOK_ALLOW_PRIVATE``) no literal private,
    loopback or link-local address; else a 400 naming ``field``."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise DomainError(f"{field}: an http(s) URL of at most {MAX_URL} characters", field=field)
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise DomainError(f"{field}: no spaces or control characters", field=field)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DomainError(f"{field}: an http:// or https:// URL with a host", field=field)
    if parts.username is not None or parts.password is not None:
        raise DomainError(f"{field}: no user name or password in the URL", field=field)
    try:
        parts.port  # noqa: B018 — raises on a port that is not a number in range
    except ValueError:
        raise DomainError(f"{field}: the port must be a number up to 65535", field=field) from None
    try:
        literal = ipaddress.ip_address(parts.hostname)
    except ValueError:
        return url
    if _private(literal) and not settings.BUDGET_WEBHOOK_ALLOW_PRIVATE:
        raise DomainError(f"{field}: {literal} is not a public address", field=field)
    return url


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not address.is_global or address.is_multicast


def _reachable(url: str) -> None:
    """Refuse a host that resolves to a private address (checked again at each attempt)."""
    if settings.BUDGET_WEBHOOK_ALLOW_PRIVATE:
        return
    parts = urlsplit(url)
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise WebhookRefused(f"cannot resolve {parts.hostname}: {exc}") from None
    for info in infos:
        if _private(ipaddress.ip_address(info[4][0])):
            raise WebhookRefused(f"{parts.hostname} resolves to a non-public address")


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The header's value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def signature_valid(
    header: str, body: bytes, secret: str, *, now: float, tolerance: int = TOLERANCE_SECONDS
) -> bool:
    """What a receiver checks: a ``v1`` that matches and a ``t`` within ``tolerance``."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, body, timestamp).rsplit("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


def retry_delay(attempts: int) -> timedelta:
    """Wait after the ``attempts``-th failure: 30 s, 1, 2, 4 … minutes, at most an hour."""
    return timedelta(seconds=min(30 * 2 ** max(attempts - 1, 0), 3600))


def deliveries_send(*, now: datetime | None = None) -> tuple[int, int]:
    """Send the due deliveries (pending, or failed and past their backoff): (sent, failed)."""
    now = now or timezone.now()
    due = list(
        WebhookDelivery.objects.filter(status__in=UNSENT, next_attempt_at__lte=now)
        .select_related("budget", "tenant")
        .order_by("next_attempt_at", "id")[:SEND_LIMIT]
    )
    sent = failed = 0
    if not due:
        return 0, 0
    with httpx.Client(
        timeout=settings.BUDGET_WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False
    ) as client:
        for row in due:
            if not _claim(row, now):
                continue  # another run has it
            if _attempt(client, row):
                sent += 1
            else:
                failed += 1
    return sent, failed


def _claim(row: WebhookDelivery, now: datetime) -> bool:
    """Take ``row`` for this run: count the attempt and push its next try out first."""
    claimed = WebhookDelivery.objects.filter(
        pk=row.pk, attempts=row.attempts, status__in=UNSENT
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + retry_delay(row.attempts + 1))
    row.attempts += 1
    return claimed == 1


def _attempt(client: httpx.Client, row: WebhookDelivery) -> bool:
    body = row.body.encode()
    try:
        _reachable(row.url)
        secret = secret_open(
            account_id=row.tenant.account_id,
            name=row.budget.name,
            sealed=bytes(row.budget.webhook_secret or b""),
        )
        response = client.post(
            row.url,
            content=body,
            headers={
                "Content-Type": "application/json",
                "User-Agent": "Loopwright-Webhooks/1",
                "Loopwright-Event-Id": row.event_id,
                SIGNATURE_HEADER: signature(secret, body, int(time.time())),
            },
        )
    except (httpx.HTTPError, WebhookRefused, TamperedError) as exc:
        _failed(row, f"{type(exc).__name__}: {exc}", None)
        return False
    if 200 <= response.status_code < 300:
        WebhookDelivery.objects.filter(pk=row.pk).update(
            status=WebhookDelivery.Status.SENT,
            sent_at=timezone.now(),
            last_status_code=response.status_code,
            last_error="",
        )
        return True
    _failed(row, f"answered {response.status_code}", response.status_code)
    return False


def _failed(row: WebhookDelivery, error: str, status_code: int | None) -> None:
    last = row.attempts >= settings.BUDGET_WEBHOOK_MAX_ATTEMPTS
    status = WebhookDelivery.Status.ABANDONED if last else WebhookDelivery.Status.FAILED
    log.warning("budget webhook %s attempt %d failed: %s", row.event_id, row.attempts, error)
    WebhookDelivery.objects.filter(pk=row.pk, status__in=UNSENT).update(
        status=status, last_error=error[:1000], last_status_code=status_code
    )
