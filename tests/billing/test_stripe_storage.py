"""Checkpoint storage reaches Stripe like the token meters: the storage meter's hourly usage
(millionths of a GB-month) is pushed as ``loopwright_storage_gb_months`` meter events, one per
tenant and closed window, each once, whose values add up to the GB-months kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.billing.services import billing_push
from controlplane.billing.windows import event_identifier, window_floor
from controlplane.metering.models import StoredObject
from controlplane.metering.storage import storage_meter

from .test_stripe_push import received

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
W1 = window_floor(timezone.now() - timedelta(days=2), 60)


def test_storage_is_pushed_as_its_own_meter(stripe_api, alice, charlie):
    storage_meter(now=W1)  # the meter starts here
    StoredObject.objects.create(  # one gigabyte kept three hours
        tenant=alice.tenant,
        session_id="sess-a",
        base_model="m",
        checkpoint_id=1,
        size_bytes=10**9,
        stored_from=W1,
        stored_until=W1 + 3 * HOUR,
    )
    storage_meter(now=W1 + 5 * HOUR)
    result = billing_push(now=W1 + 5 * HOUR + timedelta(minutes=16))
    assert (result.sent, result.failed) == (3, 0)
    got = received(stripe_api)
    # 3/720 GB-month is 4,166 millionths, billed as the total grows past each whole one
    values = [
        got[event_identifier(alice.tenant.account_id, "storage_gb_months", W1 + i * HOUR)]
        for i in range(3)
    ]
    assert [v[0] for v in values] == ["loopwright_storage_gb_months"] * 3
    assert [v[2] for v in values] == ["1388", "1389", "1389"]
    assert sum(int(v[2]) for v in values) == 10**9 * 3 * 1_000_000 // (10**9 * 720)
    assert billing_push(now=W1 + 7 * HOUR).sent == 0  # each once
