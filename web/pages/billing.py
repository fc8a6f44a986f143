"""Billing: usage and cost over a date range (by day and meter, by session, by key, by base
model; the last 48 hours by the hour), narrowed to one key or one run's tag if asked, the CSV
export, the current month's invoice preview and the price book in force, from the same reports
and IAM actions as the billing API (``billing:GetUsageReport``, ``billing:GetInvoices``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_GET

from controlplane.edge.callers import allow, may
from controlplane.errors import DomainError
from controlplane.fleet.selectors import served_base_models
from controlplane.metering import reports
from controlplane.metering.models import Meter
from controlplane.training_sessions.tags import sessions_tagged, tag_checked

from ..charts import Series, bar_chart
from ..formkit import Form
from ..login_required import page
from ..prices import price_rows, scheduled
from ..values import meter_name, usd

TOP_SESSIONS = 50
HOURS = 48  # the hourly chart's span


class RangeForm(Form):
    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"))
    end = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"))
    api_key = forms.CharField(
        label="Key", required=False, max_length=32, help_text="Optional: one key's prefix."
    )
    tag = forms.CharField(
        label="Run (tag)", required=False, max_length=256, help_text="Optional: one run's tag."
    )


def tokens(n: int) -> str:
    return f"{n:,}"


def _days(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def _charts(report: reports.Report, start: date, end: date) -> tuple[str, str]:
    """Tokens and cost per day, stacked by meter."""
    days = _days(start, end)
    index = {d.isoformat(): i for i, d in enumerate(days)}
    labels = [f"{d:%b} {d.day}" for d in days]
    quantity: dict[str, list[tuple[int, float]]] = {m: [] for m in Meter.values}
    cost: dict[str, list[tuple[int, float]]] = {m: [] for m in Meter.values}
    for line in report.lines:
        key = dict(line.key)
        i = index[key["day"]]
        quantity[key["meter"]].append((i, float(line.quantity)))
        cost[key["meter"]].append((i, float(line.cost)))
    used = [m for m in Meter.values if quantity[m]]
    return (
        bar_chart(
            "Tokens per day, by meter", labels, [Series(meter_name(m), quantity[m]) for m in used]
        ),
        bar_chart(
            "Cost per day in US dollars, by meter",
            labels,
            [Series(meter_name(m), cost[m]) for m in used],
        ),
    )


def _breakdown(report: reports.Report, key: str) -> list[dict]:
    """One row per value of ``key``, most expensive first, with its share of the cost (of the
    tokens when nothing cost anything)."""
    total_cost, total_quantity = report.cost, report.quantity
    rows = []
    for line in sorted(report.lines, key=lambda ln: (-ln.cost, -ln.quantity)):
        if total_cost:
            share = float(line.cost / total_cost * 100)
        else:
            share = line.quantity / total_quantity * 100 if total_quantity else 0.0
        name = dict(line.key)[key]
        amount = tokens(line.quantity)
        if key == "meter" and name == Meter.STORAGE_GB_MONTHS:
            amount = f"{line.quantity / 1_000_000:,.6f} GB-months"
        rows.append(
            {
                "name": meter_name(name) if key == "meter" else name,
                "tokens": amount,
                "cost": usd(line.cost),
                "share": round(share, 1),
            }
        )
    return rows


def _range(request: HttpRequest, today: date) -> tuple[RangeForm, tuple[date, date] | None]:
    """The date range asked for (this month so far by default), checked as the API checks it."""
    first = today.replace(day=1)
    raw_start, raw_end = request.GET.get("start"), request.GET.get("end")
    narrowed = {k: request.GET.get(k, "") for k in ("api_key", "tag")}
    if not raw_start and not raw_end and not any(narrowed.values()):
        return RangeForm(initial={"start": first, "end": today}), (first, today)
    form = RangeForm(
        {"start": raw_start or first.isoformat(), "end": raw_end or today.isoformat(), **narrowed}
    )
    if not form.is_valid():
        return form, None
    try:
        chosen = reports.parse_range(
            form.cleaned_data["start"].isoformat(),
            form.cleaned_data["end"].isoformat(),
            today=today,
        )
    except DomainError as exc:
        form.add_domain_error(exc)
        return form, None
    return form, chosen


def _filters(request: HttpRequest, form: RangeForm) -> dict | None:
    """The reports' narrowing the form asks for (a key, a run's tag); None when it is bad."""
    data = getattr(form, "cleaned_data", {}) or {}
    filters: dict = {}
    if data.get("api_key"):
        filters["api_key"] = data["api_key"]
    if data.get("tag"):
        try:
            filters["session_in"] = sessions_tagged(
                tenant=request.tenant, tag=tag_checked(data["tag"])
            )
        except DomainError as exc:
            exc.field = "tag"
            form.add_domain_error(exc)
            return None
    return filters


def _hourly(tenant, filters: dict) -> str:
    """Cost per hour over the last ``HOURS`` hours, stacked by meter."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    first = now - timedelta(hours=HOURS - 1)
    report = reports.usage_report(
        tenant=tenant,
        start=first.date(),
        end=now.date(),
        group_by=("hour", "meter"),
        **filters,
    )
    hours = [first + timedelta(hours=i) for i in range(HOURS)]
    index = {h.strftime("%Y-%m-%dT%H:%M:%SZ"): i for i, h in enumerate(hours)}
    cost: dict[str, list[tuple[int, float]]] = {m: [] for m in Meter.values}
    for line in report.lines:
        key = dict(line.key)
        if key["hour"] in index:
            cost[key["meter"]].append((index[key["hour"]], float(line.cost)))
    labels = [f"{h:%H}h" if h.hour else f"{h:%b} {h.day}" for h in hours]
    series = [Series(meter_name(m), cost[m]) for m in Meter.values if cost[m]]
    return bar_chart(
        "Cost per hour in US dollars, the last 48 hours (UTC), by meter", labels, series
    )


@page
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    allow(request, "billing:GetUsageReport")
    today = timezone.now().date()
    form, chosen = _range(request, today)
    context: dict = {
        "form": form,
        "max_days": reports.MAX_RANGE_DAYS,
        "invoice": None,
        "invoice_allowed": False,
    }
    filters = _filters(request, form) if chosen is not None else None
    if chosen is not None and filters is not None:
        start, end = chosen
        tenant = request.tenant

        def report(*group_by: str) -> reports.Report:
            return reports.usage_report(
                tenant=tenant, start=start, end=end, group_by=group_by, **filters
            )

        by_day = report("day", "meter")
        by_session = report("session")
        by_model = report("base_model")
        by_meter = report("meter")
        by_key = report("api_key")
        tokens_chart, cost_chart = _charts(by_day, start, end)
        sessions = _breakdown(by_session, "session")
        context |= {
            "start": start,
            "end": end,
            "days": (end - start).days + 1,
            "total_tokens": tokens(by_day.quantity),
            "total_cost": usd(by_day.cost),
            "tokens_chart": tokens_chart,
            "cost_chart": cost_chart,
            "sessions": sessions[:TOP_SESSIONS],
            "more_sessions": max(len(sessions) - TOP_SESSIONS, 0),
            "models": _breakdown(by_model, "base_model"),
            "meters": _breakdown(by_meter, "meter"),
            "keys": _breakdown(by_key, "api_key"),
            "hourly_chart": _hourly(tenant, filters),
            "group_keys": reports.GROUP_KEYS,
            "hourly_days": reports.MAX_HOURLY_DAYS,
            "narrowed": {
                k: v
                for k, v in getattr(form, "cleaned_data", {}).items()
                if k in ("api_key", "tag") and v
            },
        }
    if may(request, "billing:GetInvoices"):
        preview = reports.invoice_preview(tenant=request.tenant, today=today)
        context["invoice_allowed"] = True
        context["invoice"] = preview | {
            "rows": [
                line
                | {
                    "tokens": tokens(line["quantity"]),
                    "amount": usd(line["cost"]),
                    "meter_label": meter_name(line["meter"]),
                }
                for line in preview["lines"]
            ],
            "total_tokens": tokens(preview["total_quantity"]),
            "subtotal_text": usd(preview["subtotal"]),
            "amount_due_text": usd(preview["amount_due"]),
            # charged in whole cents: a subtotal under half a cent is nothing to pay
            "rounded_away": Decimal(preview["subtotal"]) > 0
            and Decimal(preview["amount_due"]) == 0,
        }
    now = timezone.now()
    served = [m.name for m in served_base_models()]
    context["prices"] = price_rows(base_models=served, now=now)
    context["price_changes"] = scheduled(now=now)
    refused = chosen is None or filters is None
    return render(request, "web/billing/usage.html", context, status=400 if refused else 200)


@page
@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The API's CSV: the same parameters (``group_by`` may also repeat, as checkboxes send it)."""
    q = request.GET
    start, end = reports.parse_range(q.get("start"), q.get("end"), today=timezone.now().date())
    group_by = reports.parse_group_by(",".join(q.getlist("group_by")))
    reports.hourly_range_check(group_by, start, end)
    meters = reports.parse_meters(",".join(q.getlist("meter")))
    allow(request, "billing:GetUsageReport")
    filters: dict = {}
    if q.get("api_key"):
        filters["api_key"] = q["api_key"][:32]
    if q.get("tag"):
        filters["session_in"] = sessions_tagged(tenant=request.tenant, tag=tag_checked(q["tag"]))
    report = reports.usage_report(
        tenant=request.tenant, start=start, end=end, group_by=group_by, meters=meters, **filters
    )
    response = HttpResponse(report.as_csv(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{csv_name(group_by, start, end)}"'
    return response


def csv_name(group_by: tuple[str, ...], start, end) -> str:
    """A file name saying what the export holds and for when, so that two exports can sit side
    by side: ``usage-by-day-and-meter-2025-03-01-to-2025-03-31.csv``,
    ``usage-by-session-…``, ``usage-total-…``."""
    what = "by-" + "-and-".join(group_by) if group_by else "total"
    return f"usage-{what}-{start.isoformat()}-to-{end.isoformat()}.csv"


urlpatterns = [
    path("billing", usage, name="billing"),
    path("billing/usage.csv", usage_csv, name="billing_csv"),
]
