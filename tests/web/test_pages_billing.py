"""The billing page: usage and cost charts by day and meter, breakdowns by session and base
model, the date range checked as the API checks it, the API's CSV and the invoice preview; charlie
sees none of acme's usage and bob (a member) may not see billing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.metering.models import Meter, UsageRecord
from controlplane.metering.rollup import usage_rows_write
from controlplane.metering.services import price_set
from controlplane.tenants.models import Membership
from tests.support.pages import member
from web.charts import fmt, nice_ticks
from web.values import usd

pytestmark = pytest.mark.django_db

BASE, OTHER = "loopwright/tiny-byte-llama", "other/model"
PRICES = {"train_tokens": "0.30", "forward_tokens": "0.10", "prefill_tokens": "0.10",
          "sampled_tokens": "0.25"}  # fmt: skip


def prices() -> None:
    """The documented default prices (a transactional test elsewhere may have flushed them)."""
    for meter, price in PRICES.items():
        price_set(
            base_model="*",
            meter=meter,
            per_million=Decimal(price),
            effective_from=datetime(2025, 1, 1, tzinfo=UTC),
        )


def usage(tenant, session_id: str, base: str, meter: str, quantity: int, at: datetime) -> None:
    usage_rows_write(
        [
            UsageRecord(
                tenant=tenant,
                session_id=session_id,
                base_model=base,
                meter=meter,
                quantity=quantity,
                occurred_at=at,
            )
        ]
    )


def seed_usage(tenant) -> None:
    """March 2025: 3,500,000 tokens costing $0.85, and a little today."""
    prices()
    usage(
        tenant, "sess-a", BASE, Meter.TRAIN_TOKENS, 1_000_000, datetime(2025, 3, 10, 9, tzinfo=UTC)
    )
    usage(
        tenant,
        "sess-a",
        BASE,
        Meter.SAMPLED_TOKENS,
        2_000_000,
        datetime(2025, 3, 11, 9, tzinfo=UTC),
    )
    usage(
        tenant,
        "sess-b",
        OTHER,
        Meter.FORWARD_TOKENS,
        500_000,
        datetime(2025, 3, 11, 23, tzinfo=UTC),
    )
    usage(tenant, "sess-c", BASE, Meter.PREFILL_TOKENS, 1_234, timezone.now())  # fmt: skip


MARCH = {"start": "2025-03-01", "end": "2025-03-31"}


def test_money_is_shown_as_the_api_counts_it() -> None:
    assert usd("0.850000") == "$0.85"
    assert usd(Decimal("1234.5")) == "$1,234.50"
    assert usd("0.000123") == "$0.000123"
    assert usd("0") == "$0.00"


def test_logged_out_goes_to_login(client) -> None:
    for url in ("/billing", "/billing/usage.csv"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/login?next=/billing")


def test_usage_charts_and_breakdowns(alice) -> None:
    seed_usage(alice.tenant)
    r = alice.get("/billing", MARCH)
    page = r.content.decode()
    assert r.status_code == 200
    assert "3,500,000" in page and "$0.85" in page  # totals
    # tokens and cost per day, stacked by meter; cost per hour of the last 48 hours
    assert page.count('<svg class="chart"') == 3
    assert "Mar 10 · Training tokens: 1M" in page and "Mar 11 · Sampled tokens: 2M" in page
    assert "Mar 11 · Forward tokens: 500k" in page
    assert "train_tokens" not in page.split('id="export"')[0]  # meters have names people read
    assert "/sessions/sess-a" in page and "/sessions/sess-b" in page
    assert "sess-c" not in page.split('id="invoice"')[0]  # today's usage is not in March
    assert "$0.80" in page and "$0.05" in page  # sess-a, sess-b
    assert "94.1%" in page and "5.9%" in page  # shares of the cost
    assert BASE in page and OTHER in page and "2,500,000" not in page


def test_default_range_is_this_month_with_the_invoice_preview(alice) -> None:
    seed_usage(alice.tenant)
    page = alice.get("/billing").content.decode()
    today = timezone.now().date()
    assert f'value="{today.replace(day=1).isoformat()}"' in page
    assert f'value="{today.isoformat()}"' in page
    assert "/sessions/sess-c" in page and "1,234" in page
    invoice = page.split('id="invoice"')[1]
    assert "Prompt tokens (sampling)" in invoice and "$0.000123" in invoice and "$0.00" in invoice
    # a subtotal under half a cent is nothing to pay, and the page says why
    assert "less than half a cent" in invoice and "charged in whole cents" in invoice
    assert "USD" not in page.split("<main", 1)[1]  # one money format: $…


def test_the_price_book_is_shown_before_anything_is_spent(alice, bob, charlie) -> None:
    prices()
    price_set(base_model=OTHER, meter=Meter.SAMPLED_TOKENS, per_million=Decimal("0.20"),
              effective_from=datetime(2099, 1, 1, tzinfo=UTC))  # fmt: skip
    page = alice.get("/billing").content.decode()
    table = page.split('id="prices"')[1]
    assert "any base model" in table and "Training tokens" in table and "$0.30" in table
    assert "$0.0003" in table  # per thousand training tokens
    assert "Scheduled changes: Sampled tokens on" in table and "2099-01-01" in table
    assert charlie.get("/billing").status_code == 200  # prices are the service's, not acme's


def test_range_errors_are_shown_in_place(alice) -> None:
    r = alice.get("/billing", {"start": "2025-03-10", "end": "2025-03-01"})
    body = r.content.decode()
    assert r.status_code == 400 and "must not be before start" in body
    assert "end: must" not in body  # the label names the field
    assert 'id="id_end_error"' in body and 'aria-invalid="true"' in body
    r = alice.get("/billing", {"start": "2024-01-01", "end": "2025-03-01"})
    assert r.status_code == 400 and "at most 366 days" in r.content.decode()
    r = alice.get("/billing", {"start": "2025-13-01", "end": "2025-03-01"})
    assert r.status_code == 400 and "Enter a valid date" in r.content.decode()


def test_csv_is_the_apis(alice) -> None:
    seed_usage(alice.tenant)
    r = alice.get("/billing/usage.csv", MARCH | {"group_by": ["day", "meter"]})
    assert r.status_code == 200 and r["Content-Type"] == "text/csv; charset=utf-8"
    assert r["Content-Disposition"] == (
        'attachment; filename="usage-by-day-and-meter-2025-03-01-to-2025-03-31.csv"'
    )
    api = APIClient()
    api.credentials(HTTP_X_API_KEY=alice.api_key)
    expected = api.get("/api/v1/billing/usage", MARCH | {"group_by": "day,meter", "format": "csv"})
    assert expected.status_code == 200 and r.content == expected.content
    assert r.content.decode().splitlines()[0] == "day,meter,quantity,cost,currency"
    assert "2025-03-10,train_tokens,1000000,0.300000,usd" in r.content.decode()
    r = alice.get("/billing/usage.csv", MARCH | {"group_by": "colour"})
    assert r.status_code == 400 and "group_by: unknown key" in r.content.decode()


def test_charlie_sees_none_of_acmes_usage(alice, charlie) -> None:
    seed_usage(alice.tenant)
    page = charlie.get("/billing", MARCH).content.decode()
    assert "sess-a" not in page and "3,500,000" not in page and "No usage in this range" in page
    csv = charlie.get("/billing/usage.csv", MARCH | {"group_by": "session"}).content.decode()
    assert csv == "session,quantity,cost,currency\n"


def test_bob_may_not_see_billing_but_a_billing_viewer_may(alice, bob) -> None:
    r = bob.get("/billing")
    assert r.status_code == 403 and "billing:GetUsageReport" in r.content.decode()
    assert bob.get("/billing/usage.csv").status_code == 403
    viewer = member("vera", alice, Membership.Role.BILLING_VIEWER)
    assert viewer.get("/billing").status_code == 200


def test_chart_numbers_round_before_their_unit_and_flat_series_draw() -> None:
    assert [fmt(v) for v in (999_999, 9_999.9, 12_345, 0.25, 999_999_999)] == [
        "1M",
        "10k",
        "12.3k",
        "0.25",
        "1G",
    ]
    # a series flat but for float noise once made the tick loop spin for ever
    assert nice_ticks(1.0, 1.0000000000000002) == [1.0, 1.25, 1.5, 1.75, 2.0]


def test_each_csv_export_has_a_name_of_its_own_with_its_period(alice, charlie) -> None:
    names = set()
    for group_by in (["day"], ["session"], ["day", "meter"], []):
        r = alice.get("/billing/usage.csv", MARCH | {"group_by": group_by})
        assert r.status_code == 200
        names.add(r["Content-Disposition"])
    assert names == {
        f'attachment; filename="usage-{what}-2025-03-01-to-2025-03-31.csv"'
        for what in ("by-day", "by-session", "by-day-and-meter", "total")
    }
    other = charlie.get("/billing/usage.csv", MARCH | {"group_by": ["session"]})
    assert other.content.decode() == "session,quantity,cost,currency\n"  # none of acme's
