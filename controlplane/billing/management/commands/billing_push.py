"""Push closed usage windows to Stripe now, or reconcile a period (``--reconcile START END``)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta

from django.core.management.base import BaseCommand, CommandError

from controlplane.billing.reconciliation import billing_reconcile
from controlplane.billing.services import billing_push
from controlplane.tenants.models import Tenant


def _when(raw: str, *, end: bool) -> datetime:
    """An ISO date (an end date is included: its next midnight) or an ISO date-time (UTC if naive)."""
    try:
        if len(raw) == 10:
            day = date.fromisoformat(raw) + timedelta(days=1 if end else 0)
            return datetime.combine(day, time.min, tzinfo=UTC)
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise CommandError(f"{raw!r}: an ISO date or date-time") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser):
        parser.add_argument("--reconcile", nargs=2, metavar=("START", "END"))
        parser.add_argument("--account", help="only this account id (with --reconcile)")

    def handle(self, *args, **opts):
        if opts["reconcile"]:
            start, end = (_when(v, end=i == 1) for i, v in enumerate(opts["reconcile"]))
            tenant = None
            if opts["account"]:
                tenant = Tenant.objects.filter(account_id=opts["account"]).first()
                if tenant is None:
                    raise CommandError(f"no account {opts['account']}")
            report = billing_reconcile(start, end, tenant=tenant)
            self.stdout.write(json.dumps(report.as_json(), indent=2))
            return
        result = billing_push()
        if not result.enabled:
            self.stdout.write("Stripe push is off: LOOPWRIGHT_STRIPE_API_KEY is not set")
            return
        self.stdout.write(
            f"closed until {result.closed_until.isoformat()}: {result.recorded} meter events "
            f"recorded, {result.sent} sent, {result.failed} failed"
        )
