"""Usage pushed to Stripe meters: off without a key, one event per tenant, meter and closed window,
each identifier sent once through failures and reruns, reconciliation, and who may read it."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from controlplane.billing.models import MeterEventBatch, StripeCustomer
from controlplane.billing.reconciliation import billing_reconcile
from controlplane.billing.services import billing_push
from controlplane.billing.windows import event_identifier, window_floor
from controlplane.housekeeping.janitor import sweep
from controlplane.metering.models import UsageRecord

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
# the first window: a whole hour two days ago (well inside Stripe's 35 days)
W1 = window_floor(timezone.now() - timedelta(days=2), 60)
W2 = W1 + HOUR
AFTER_BOTH = W2 + HOUR + timedelta(minutes=16)  # both windows closed, grace (15 min) passed


def use(person, meter: str, quantity: int, at) -> None:
    UsageRecord.objects.create(
        tenant=person.tenant, base_model="m", meter=meter, quantity=quantity, occurred_at=at
    )


@pytest.fixture
def usage(alice, charlie):
    """alice: train 60+40 in W1, sampled 7 in W2; charlie: train 5 in W1, train 9 and prefill 3
    in W2; and alice's train 11 in the window after W2 (open until AFTER_BOTH + 1 h)."""
    use(alice, "train_tokens", 60, W1 + timedelta(minutes=1))
    use(alice, "train_tokens", 40, W1 + timedelta(minutes=59, seconds=59))
    use(alice, "sampled_tokens", 7, W2)
    use(charlie, "train_tokens", 5, W1 + timedelta(minutes=30))
    use(charlie, "train_tokens", 9, W2 + timedelta(minutes=5))
    use(charlie, "prefill_tokens", 3, W2 + timedelta(minutes=6))
    use(alice, "train_tokens", 11, W2 + HOUR + timedelta(minutes=10))


def expected(alice, charlie) -> dict[str, tuple[str, str, str, int]]:
    """identifier: (event name, account id, value, timestamp)."""
    rows = [
        (alice, "train_tokens", W1, "100"),
        (alice, "sampled_tokens", W2, "7"),
        (charlie, "train_tokens", W1, "5"),
        (charlie, "train_tokens", W2, "9"),
        (charlie, "prefill_tokens", W2, "3"),
    ]
    return {
        event_identifier(p.tenant.account_id, meter, start): (
            f"loopwright_{meter}",
            p.tenant.account_id,
            value,
            int((start + HOUR).timestamp()),
        )
        for p, meter, start, value in rows
    }


def received(state) -> dict[str, tuple[str, str, str, int]]:
    account = {cid: c["metadata"]["account_id"] for cid, c in state.customers.items()}
    return {
        ident: (
            e["event_name"],
            account[e["payload"]["stripe_customer_id"]],
            e["payload"]["value"],
            e["timestamp"],
        )
        for ident, e in state.events.items()
    }


def test_off_without_a_key(settings, stripe_server, usage):
    settings.STRIPE_API_KEY = ""
    settings.STRIPE_API_BASE = stripe_server.url
    stripe_server.reset()
    assert billing_push(now=AFTER_BOTH).enabled is False
    assert sweep()["stripe_meter_events_sent"] == 0
    assert not MeterEventBatch.objects.exists()
    assert stripe_server.state.received == []


def test_two_tenants_two_meters_two_windows(stripe_api, usage, alice, charlie):
    result = billing_push(now=AFTER_BOTH)
    assert (result.recorded, result.sent, result.failed) == (5, 5, 0)
    assert received(stripe_api) == expected(alice, charlie)
    assert len(stripe_api.event_posts()) == 5
    customers = {c["metadata"]["account_id"] for c in stripe_api.customers.values()}
    assert customers == {alice.tenant.account_id, charlie.tenant.account_id}
    assert StripeCustomer.objects.count() == 2
    row = MeterEventBatch.objects.get(tenant=alice.tenant, meter="train_tokens")
    assert (row.status, row.attempts, row.quantity, row.window_end) == ("sent", 1, 100, W2)
    assert row.sent_at is not None and row.stripe_customer_id.startswith("cus_")


def test_a_second_push_sends_nothing_new(stripe_api, usage):
    billing_push(now=AFTER_BOTH)
    posts = len(stripe_api.received)
    again = billing_push(now=AFTER_BOTH + timedelta(minutes=30))
    assert (again.recorded, again.sent, again.failed) == (0, 0, 0)
    assert len(stripe_api.received) == posts


@pytest.mark.parametrize("mode", ["reset", "500"])
def test_a_failure_is_retried_after_a_backoff_and_sent_once(
    stripe_api, usage, alice, charlie, mode
):
    stripe_api.fail_next(3, mode)  # the first call and both of the library's retries
    first = billing_push(now=AFTER_BOTH)
    # an unreachable Stripe ends the run (the rest waits); a 500 fails only that one event
    assert (first.recorded, first.sent, first.failed) == (5, 4 if mode == "500" else 0, 1)
    failed = MeterEventBatch.objects.get(status="failed")
    assert failed.attempts == 1 and failed.last_error
    assert failed.identifier not in stripe_api.events

    too_soon = billing_push(now=AFTER_BOTH + timedelta(seconds=30))  # its backoff: a minute
    assert (too_soon.sent, too_soon.failed) == (0 if mode == "500" else 4, 0)
    assert failed.identifier not in stripe_api.events
    later = billing_push(now=AFTER_BOTH + timedelta(minutes=2))
    assert later.sent == 1 and later.failed == 0
    assert received(stripe_api) == expected(alice, charlie)
    assert MeterEventBatch.objects.get(pk=failed.pk).attempts == 2
    for ident, (_, _, value, _) in received(stripe_api).items():
        row = MeterEventBatch.objects.get(identifier=ident)
        local = sum(
            UsageRecord.objects.filter(
                tenant=row.tenant,
                meter=row.meter,
                occurred_at__gte=row.window_start,
                occurred_at__lt=row.window_end,
            ).values_list("quantity", flat=True)
        )
        assert int(value) == local == row.quantity


def test_a_reply_lost_after_stripe_recorded_it_is_not_counted_twice(
    stripe_api, usage, alice, charlie
):
    stripe_api.fail_next(1, "reset_after", "/v1/customers")  # created, the reply lost
    result = billing_push(now=AFTER_BOTH - HOUR)  # W1 only
    assert (result.sent, result.failed) == (2, 0)
    stripe_api.fail_next(1, "reset_after", "/v1/billing/meter_events")  # recorded, reply lost
    result = billing_push(now=AFTER_BOTH)
    assert (result.sent, result.failed) == (3, 0)
    assert received(stripe_api) == expected(alice, charlie)
    assert len(stripe_api.customers) == 2 == StripeCustomer.objects.count()
    assert len([p for m, p, _ in stripe_api.received if p == "/v1/customers"]) == 3
    posts = [p["identifier"] for p in stripe_api.event_posts()]
    assert len(posts) == 6 and len(set(posts)) == 5  # one replayed, counted once


def test_the_open_window_waits_for_its_end_and_the_grace_period(stripe_api, usage, alice):
    third = W2 + HOUR  # alice's train 11
    assert billing_push(now=third + timedelta(minutes=14)).sent == 2  # W1; W2 is in its grace
    assert billing_push(now=third + timedelta(minutes=15)).sent == 3  # W2
    assert billing_push(now=third + HOUR + timedelta(minutes=14)).sent == 0  # grace not over
    late = billing_push(now=third + HOUR + timedelta(minutes=15))
    assert late.sent == 1
    ident = event_identifier(alice.tenant.account_id, "train_tokens", third)
    assert stripe_api.events[ident]["payload"]["value"] == "11"
    assert len(stripe_api.events) == 6


def test_reconciliation_reports_matches_and_a_changed_window(stripe_api, usage, alice, charlie):
    billing_push(now=AFTER_BOTH)
    use(alice, "train_tokens", 1, W1 + timedelta(minutes=2))  # usage that arrived after the push
    report = billing_reconcile(W1, W2 + 2 * HOUR)
    assert report.counts() == {
        "match": 4,
        "mismatch": 1,
        "pending": 0,
        "failed": 0,
        "not_pushed": 1,  # alice's still open window
    }
    (changed,) = [line for line in report.lines if line.result == "mismatch"]
    assert (
        changed.account_id,
        changed.meter,
        changed.local_quantity,
        changed.recorded_quantity,
    ) == (
        alice.tenant.account_id,
        "train_tokens",
        101,
        100,
    )
    posts = len(stripe_api.received)
    billing_push(now=AFTER_BOTH + HOUR)  # the changed window is reported, never sent again
    assert stripe_api.events[changed.identifier]["payload"]["value"] == "100"
    assert len(stripe_api.event_posts()) == posts - 2 + 1  # only the third window is new


def test_reconciliation_api_is_the_tenants_own_and_needs_manage_billing(
    stripe_api, usage, alice, bob, charlie
):
    billing_push(now=AFTER_BOTH)
    day = W1.date().isoformat()
    params = {"start": day, "end": (W2 + HOUR).date().isoformat()}
    mine = alice.get("billing/reconciliation", params)
    assert mine.status_code == 200, mine.content
    lines = mine.json()["lines"]
    assert {line["account_id"] for line in lines} == {alice.tenant.account_id}
    assert {(line["meter"], line["result"]) for line in lines} >= {
        ("train_tokens", "match"),
        ("sampled_tokens", "match"),
    }
    assert all("last_error" not in line for line in lines)
    theirs = charlie.get("billing/reconciliation", params).json()["lines"]
    assert theirs and {line["account_id"] for line in theirs} == {charlie.tenant.account_id}
    denied = bob.get("billing/reconciliation", params)
    assert denied.status_code == 403
    assert alice.get("billing/reconciliation", {"start": "nope"}).status_code == 400


def test_the_command_pushes_and_reconciles(stripe_api, usage, alice):
    out = StringIO()
    call_command("billing_push", stdout=out)
    assert "6 meter events recorded, 6 sent, 0 failed" in out.getvalue()
    out = StringIO()
    start, end = W1.isoformat(), (W2 + 2 * HOUR).isoformat()
    call_command(
        "billing_push", "--reconcile", start, end, "--account", alice.tenant.account_id, stdout=out
    )
    report = json.loads(out.getvalue())
    assert report["counts"]["match"] == 3  # W1, W2 and the window after
    assert {line["account_id"] for line in report["lines"]} == {alice.tenant.account_id}


def test_identifiers_are_deterministic_and_within_stripes_limit():
    one = event_identifier("123456789012", "train_tokens", W1)
    assert one == event_identifier("123456789012", "train_tokens", W1)
    assert one == f"lw-123456789012-train_tokens-{W1:%Y-%m-%dT%H:%M}Z"
    long = event_identifier("9" * 200, "train_tokens", W1)
    assert len(long) <= 100 and long.startswith("lw-")
