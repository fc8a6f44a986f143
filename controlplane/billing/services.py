"""Turn closed usage windows into meter event rows and send the due ones to Stripe, each once."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import stripe
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane.tenants.models import Tenant

from .models import MeterEventBatch, PushCursor, StripeCustomer
from .stripe_api import customer_create, meter_event_send, stripe_client
from .usage import local_usage
from .windows import closed_until, event_identifier, window_floor

log = logging.getLogger("loopwright.billing")

CURSOR = "meter_events"
SEND_LIMIT = 500  # meter events sent per run at most; the rest go on the next run
UNSENT = (MeterEventBatch.Status.PENDING, MeterEventBatch.Status.FAILED)


@dataclass
class PushResult:
    enabled: bool
    closed_until: datetime | None = None
    recorded: int = 0
    sent: int = 0
    failed: int = 0


def pushed_meters() -> dict[str, str]:
    """Our meters that have a Stripe meter event name."""
    return {meter: name for meter, name in settings.STRIPE_METER_EVENT_NAMES.items() if name}


def retry_delay(attempts: int) -> timedelta:
    """Wait after the ``attempts``-th failed send: 1, 2, 4 … minutes, at most an hour."""
    return timedelta(seconds=min(60 * 2 ** max(attempts - 1, 0), 3600))


def billing_push(now: datetime | None = None) -> PushResult:
    """Record every newly closed window's usage as meter event rows, then send the due rows.

    Off (nothing recorded, nothing sent) while ``STRIPE_API_KEY`` is empty.
    """
    if not settings.STRIPE_API_KEY:
        return PushResult(enabled=False)
    now = now or timezone.now()
    minutes = settings.STRIPE_PUSH_WINDOW_MINUTES
    until = closed_until(now, minutes, settings.STRIPE_PUSH_GRACE_MINUTES)
    result = PushResult(enabled=True, closed_until=until)
    result.recorded = windows_record(now, until)
    result.sent, result.failed = events_send(now)
    if result.recorded or result.sent or result.failed:
        log.info(
            "stripe push: %d meter events recorded, %d sent, %d failed (closed until %s)",
            result.recorded,
            result.sent,
            result.failed,
            until.isoformat(),
        )
    return result


def windows_record(now: datetime, until: datetime) -> int:
    """Meter event rows for the windows between the cursor and ``until``; moves the cursor."""
    minutes = settings.STRIPE_PUSH_WINDOW_MINUTES
    oldest = window_floor(now - timedelta(days=settings.STRIPE_PUSH_BACKFILL_DAYS), minutes)
    cursor = PushCursor.objects.filter(name=CURSOR).first()
    start = max(cursor.through, oldest) if cursor else oldest
    if start >= until:
        return 0
    names = pushed_meters()
    usage = local_usage(start, until, minutes=minutes, meters=names)
    accounts = dict(
        Tenant.objects.filter(id__in={key[0] for key in usage}).values_list("id", "account_id")
    )
    rows = [
        MeterEventBatch(
            tenant_id=tenant_id,
            meter=meter,
            event_name=names[meter],
            window_start=window,
            window_end=window_floor(window, minutes) + timedelta(minutes=minutes),
            quantity=quantity,
            identifier=event_identifier(accounts[tenant_id], meter, window),
            next_attempt_at=now,
        )
        for (tenant_id, meter, window), quantity in sorted(usage.items(), key=str)
        if quantity > 0 and tenant_id in accounts
    ]
    with transaction.atomic():
        MeterEventBatch.objects.bulk_create(rows, ignore_conflicts=True)
        _, made = PushCursor.objects.get_or_create(name=CURSOR, defaults={"through": until})
        if not made:
            PushCursor.objects.filter(name=CURSOR, through__lt=until).update(through=until)
    return len(rows)


def events_send(now: datetime) -> tuple[int, int]:
    """Send the due rows (pending, or failed and past their backoff); (sent, failed)."""
    due = list(
        MeterEventBatch.objects.filter(status__in=UNSENT, next_attempt_at__lte=now)
        .select_related("tenant")
        .order_by("window_start", "id")[:SEND_LIMIT]
    )
    if not due:
        return 0, 0
    sent = failed = 0
    with stripe_client() as client:
        for row in due:
            if not _claim(row, now):
                continue  # another run is sending it
            try:
                customer_id = customer_for(client, row.tenant)
                meter_event_send(
                    client,
                    event_name=row.event_name,
                    identifier=row.identifier,
                    customer_id=customer_id,
                    quantity=row.quantity,
                    timestamp=row.window_end,
                )
            except stripe.StripeError as exc:
                failed += 1
                _mark_failed(row, exc)
                if isinstance(exc, stripe.APIConnectionError):
                    break  # Stripe is out of reach: the rest waits for the next run
                continue
            sent += 1
            MeterEventBatch.objects.filter(pk=row.pk).update(
                status=MeterEventBatch.Status.SENT,
                stripe_customer_id=customer_id,
                sent_at=timezone.now(),
                last_error="",
            )
    return sent, failed


def customer_for(client: stripe.StripeClient, tenant: Tenant) -> str:
    """The tenant's Stripe customer id, created (once) on first use."""
    known = StripeCustomer.objects.filter(tenant=tenant).first()
    if known is not None:
        return known.customer_id
    customer_id = customer_create(client, tenant)
    record, _ = StripeCustomer.objects.get_or_create(
        tenant=tenant, defaults={"customer_id": customer_id}
    )
    return record.customer_id


def _claim(row: MeterEventBatch, now: datetime) -> bool:
    """Take ``row`` for this run: count the attempt and set its next try (a lease) first."""
    claimed = MeterEventBatch.objects.filter(
        pk=row.pk, attempts=row.attempts, status__in=UNSENT
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + retry_delay(row.attempts + 1))
    row.attempts += 1
    return claimed == 1


def _mark_failed(row: MeterEventBatch, exc: stripe.StripeError) -> None:
    message = f"{type(exc).__name__}: {exc.user_message or exc}"[:2000]
    log.warning("stripe push: %s failed (attempt %d): %s", row.identifier, row.attempts, message)
    MeterEventBatch.objects.filter(pk=row.pk, status__in=UNSENT).update(
        status=MeterEventBatch.Status.FAILED, last_error=message
    )
