"""Usage as Tinker's ``AdminClient`` reads it: hourly events per meter, base model, session and
key, priced from the price book (``get_billing_usage``), and the checkpoint storage kept now
(``get_current_checkpoint_storage_usage``)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

from django.db.models import Sum
from django.db.models.functions import TruncHour

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, Session

from . import selectors
from .models import Meter, StoredObject
from .pricing import MILLION, ZERO, PriceBook
from .reports import CURRENCY
from .storage import GIGABYTE, MONTH_HOURS

MAX_WINDOW = timedelta(days=14)
PROJECT_ID = "default"  # one project per account
_TYPES = {  # our meter -> Tinker's event type
    Meter.TRAIN_TOKENS: "training",
    Meter.FORWARD_TOKENS: "training",
    Meter.PREFILL_TOKENS: "sampling_prefill",
    Meter.SAMPLED_TOKENS: "sampling_sample",
    Meter.STORAGE_GB_MONTHS: "storage",
}


def window_checked(starting_on: str | None, ending_before: str | None, *, now: datetime) -> tuple:
    """RFC 3339 bounds on whole UTC hours, ``starting_on`` not in the future, at most 14 days
    apart; else a 400 naming the parameter."""
    start = _hour(starting_on, "starting_on")
    end = _hour(ending_before, "ending_before")
    if start > now:
        raise DomainError("starting_on: must not be in the future", field="starting_on")
    if end <= start:
        raise DomainError("ending_before: must be after starting_on", field="ending_before")
    if end - start > MAX_WINDOW:
        raise DomainError("ending_before: at most 14 days after starting_on", field="ending_before")
    return start, end


def _hour(raw: str | None, name: str) -> datetime:
    if not raw:
        raise DomainError(f"{name} is required (an RFC 3339 time on a UTC hour)", field=name)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise DomainError(
            f"{name}: an RFC 3339 time, e.g. 2026-07-13T00:00:00Z", field=name
        ) from None
    if value.tzinfo is None:
        raise DomainError(f"{name}: give the time zone (Z for UTC)", field=name)
    value = value.astimezone(UTC)
    if value.minute or value.second or value.microsecond:
        raise DomainError(f"{name}: must be on a whole UTC hour", field=name)
    return value


def billing_usage(*, tenant: Tenant, start: datetime, end: datetime) -> dict:
    """Tinker's ``BillingUsageResponse`` for ``[start, end)``, with ``meter``, ``api_key`` and
    ``cost`` (an exact decimal string) on each event as well."""
    book = PriceBook.of(selectors.price_points(currency=CURRENCY))
    cuts = [start, *book.changes_within(start, end), end]
    groups: dict[tuple, list] = defaultdict(lambda: [0, ZERO])
    for a, b in pairwise(cuts):
        rows = (
            selectors.usage_rows(tenant=tenant, start=a, end=b)
            .annotate(hour=TruncHour("occurred_at", tzinfo=UTC))
            .values("hour", "meter", "base_model", "session_id", "api_key")
            .annotate(q=Sum("quantity"))
            .order_by()
        )
        for row in rows:
            key = (row["hour"], row["meter"], row["base_model"], row["session_id"], row["api_key"])
            groups[key][0] += row["q"]
            groups[key][1] += book.cost(row["base_model"], row["meter"], a, row["q"])
    events = [_event(key, q, cost, book) for key, (q, cost) in groups.items()]
    events.sort(key=lambda e: (e["bucket_start"], -_size(e)))
    ids = {e["session_id"] for e in events if e["session_id"]}
    return {
        "data": events,
        "sessions": _sessions(tenant, ids),
        "cost_data_through": None,  # every cost is from the price book, none from an invoice
    }


def _event(key: tuple, quantity: int, cost: Decimal, book: PriceBook) -> dict:
    hour, meter, base_model, session_id, api_key = key
    hour = hour.astimezone(UTC)
    rate = book.per_million(base_model, meter, hour)
    event = {
        "bucket_start": _z(hour),
        "bucket_end": _z(hour + timedelta(hours=1)),
        "base_model": base_model or None,
        "user_id": None,
        "user_name": None,
        "session_id": session_id or None,
        "project_id": PROJECT_ID,
        "estimated_cost_usd": float(cost),
        "effective_rate_usd_per_million_tokens": None,
        "effective_rate_usd_per_gigabyte_month": None,
        "meter": meter,
        "api_key": api_key or None,
        "cost": str(cost.quantize(Decimal("0.000001"))),
    }
    if meter == Meter.STORAGE_GB_MONTHS:
        event["effective_rate_usd_per_gigabyte_month"] = None if rate is None else float(rate)
        hours = Decimal(quantity) * MONTH_HOURS / MILLION
        event["event_info"] = {"type": "storage", "free": False, "gigabyte_hours": float(hours)}
        return event
    event["effective_rate_usd_per_million_tokens"] = None if rate is None else float(rate)
    info: dict = {"type": _TYPES.get(meter, "training"), "token_count": quantity}
    if meter == Meter.PREFILL_TOKENS:
        info["cached"] = False
    event["event_info"] = info
    return event


def _size(event: dict) -> float:
    info = event["event_info"]
    return float(info.get("token_count", info.get("gigabyte_hours", 0)))


def _z(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _sessions(tenant: Tenant, ids: set[str]) -> dict:
    found = Session.objects.filter(tenant=tenant, id__in=ids).values_list("id", "user_metadata")
    return {
        sid: {
            "user_metadata": (
                {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else None
            )
        }
        for sid, meta in found
    }


def storage_now(*, tenant: Tenant, project_id: str | None, now: datetime) -> dict:
    """Tinker's ``CurrentCheckpointStorageUsageResponse``: the checkpoints kept now and what a
    month of them costs at the storage price in force."""
    book = PriceBook.of(selectors.price_points(currency=CURRENCY))
    rate = book.per_million("*", Meter.STORAGE_GB_MONTHS, now)
    data = []
    if project_id in (None, PROJECT_ID):
        kept = StoredObject.objects.filter(tenant=tenant, stored_until=None)
        size = kept.aggregate(b=Sum("size_bytes"))["b"] or 0
        count = Checkpoint.objects.filter(tenant=tenant).count()
        gigabytes = Decimal(size) / GIGABYTE
        data.append(
            {
                "project_id": PROJECT_ID,
                "org_user_urn": None,
                "user_email": None,
                "user_name": None,
                "checkpoint_count": count,
                "size_bytes": int(size),
                "size_gigabytes": float(gigabytes),
                "estimated_monthly_cost_usd": None if rate is None else float(gigabytes * rate),
            }
        )
    return {
        "effective_rate_usd_per_gigabyte_month": None if rate is None else float(rate),
        "data": data,
    }
