"""Local usage per tenant, meter and window compared with the meter events recorded for it."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from controlplane.tenants.models import Tenant

from .models import MeterEventBatch
from .services import pushed_meters
from .usage import local_usage
from .windows import window_floor

log = logging.getLogger("loopwright.billing")

# match: sent with the local quantity; mismatch: sent, but local usage differs now;
# pending / failed: recorded, not sent yet; not_pushed: local usage without a meter event
RESULTS = ("match", "mismatch", "pending", "failed", "not_pushed")


@dataclass(frozen=True)
class Line:
    account_id: str
    meter: str
    window_start: str
    window_end: str
    local_quantity: int
    recorded_quantity: int | None
    result: str
    identifier: str | None
    attempts: int
    last_error: str


@dataclass
class Reconciliation:
    start: datetime
    end: datetime
    window_minutes: int
    lines: list[Line] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(line.result for line in self.lines)
        return {result: found.get(result, 0) for result in RESULTS}

    def as_json(self, *, errors: bool = True) -> dict:
        lines = [asdict(line) for line in self.lines]
        if not errors:
            for line in lines:
                line.pop("last_error")
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "window_minutes": self.window_minutes,
            "lines": lines,
            "counts": self.counts(),
        }


def billing_reconcile(
    start: datetime, end: datetime, *, tenant: Tenant | None = None
) -> Reconciliation:
    """Every window that starts in [start, end) with usage or a meter event, and how they compare."""
    minutes = settings.STRIPE_PUSH_WINDOW_MINUTES
    first = window_floor(start, minutes)
    usage = local_usage(first, end, minutes=minutes, meters=pushed_meters(), tenant=tenant)
    events = MeterEventBatch.objects.filter(window_start__gte=first, window_start__lt=end)
    if tenant is not None:
        events = events.filter(tenant=tenant)
    recorded = {(e.tenant_id, e.meter, e.window_start): e for e in events}
    keys = set(usage) | set(recorded)
    accounts = dict(
        Tenant.objects.filter(id__in={key[0] for key in keys}).values_list("id", "account_id")
    )
    report = Reconciliation(start=first, end=end, window_minutes=minutes)
    for key in sorted(keys, key=lambda k: (accounts.get(k[0], ""), k[2], k[1])):
        tenant_id, meter, window = key
        local, event = usage.get(key, 0), recorded.get(key)
        result = _result(local, event)
        if result == "mismatch":
            log.warning(
                "stripe reconciliation: %s sent %d, local usage now %d",
                event.identifier,
                event.quantity,
                local,
            )
        report.lines.append(
            Line(
                account_id=accounts.get(tenant_id, ""),
                meter=meter,
                window_start=window.isoformat(),
                window_end=(
                    event.window_end
                    if event
                    else window_floor(window, minutes) + timedelta(minutes=minutes)
                ).isoformat(),
                local_quantity=local,
                recorded_quantity=event.quantity if event else None,
                result=result,
                identifier=event.identifier if event else None,
                attempts=event.attempts if event else 0,
                last_error=event.last_error if event else "",
            )
        )
    return report


def _result(local: int, event: MeterEventBatch | None) -> str:
    if event is None:
        return "not_pushed"
    if event.status != MeterEventBatch.Status.SENT:
        return event.status
    return "match" if event.quantity == local else "mismatch"
