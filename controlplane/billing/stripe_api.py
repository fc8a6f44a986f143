"""The calls made to Stripe, through the official library pointed at ``STRIPE_API_BASE``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import stripe
from django.conf import settings

from controlplane.tenants.models import Tenant


@contextmanager
def stripe_client() -> Iterator[stripe.StripeClient]:
    """A client with the configured key, address and network retries, closed afterwards."""
    base = settings.STRIPE_API_BASE.rstrip("/")
    http = stripe.RequestsClient()
    client = stripe.StripeClient(
        settings.STRIPE_API_KEY,
        base_addresses={"api": base, "meter_events": base},
        max_network_retries=settings.STRIPE_MAX_NETWORK_RETRIES,
        http_client=http,
    )
    try:
        yield client
    finally:
        http.close()


def customer_create(client: stripe.StripeClient, tenant: Tenant) -> str:
    """A new Stripe customer for ``tenant``; retried with the same key, Stripe makes only one."""
    customer = client.v1.customers.create(
        params={"name": tenant.name, "metadata": {"account_id": tenant.account_id}},
        options={"idempotency_key": f"lw-customer-{tenant.account_id}"},
    )
    return customer.id


def meter_event_send(
    client: stripe.StripeClient,
    *,
    event_name: str,
    identifier: str,
    customer_id: str,
    quantity: int,
    timestamp: datetime,
) -> None:
    """One meter event; the identifier is also the idempotency key, so a replay is harmless."""
    client.v1.billing.meter_events.create(
        params={
            "event_name": event_name,
            "identifier": identifier,
            "payload": {"stripe_customer_id": customer_id, "value": str(quantity)},
            "timestamp": int(timestamp.timestamp()),
        },
        options={"idempotency_key": identifier},
    )
