"""Periodic housekeeping as Celery tasks: thin, each calls one service (see ``celery_app``)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="loopwright.housekeeping.sweep")
def sweep() -> None:
    """Expire idle sessions and old checkpoints, place waiting models, prune old rows."""
    from controlplane.housekeeping.janitor import sweep as run

    run(push_billing=False)  # the push has its own schedule


@shared_task(name="loopwright.billing.push")
def billing_push() -> dict:
    """Push closed windows of usage to Stripe Billing Meters (nothing while no key is set)."""
    from controlplane.billing.services import billing_push as push

    result = push()
    return {"enabled": result.enabled, "sent": result.sent, "failed": result.failed}
