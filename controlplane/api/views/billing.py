"""Usage and cost reports, the current month's invoice preview, a session's usage, and the
reconciliation of usage with the meter events pushed to Stripe."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta

from django.http import HttpResponse
from django.utils import timezone
from rest_framework.decorators import api_view
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.billing.reconciliation import billing_reconcile
from controlplane.edge.callers import allow, tenant_of
from controlplane.errors import DomainError
from controlplane.iam.resources import session_arn
from controlplane.metering import reports
from controlplane.metering import usage_events as events
from controlplane.training_sessions import selectors as sessions
from controlplane.training_sessions.tags import sessions_tagged, tag_checked

FORMATS = ("json", "csv")


class JsonOnly(DefaultContentNegotiation):
    """``format`` is this view's own parameter (json or csv): DRF's format override is off."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def usage_filters(tenant, q) -> dict:
    """The report's narrowing from the query: one key (``api_key``: its prefix or access key
    id), one session (``session``) or the sessions of a tag (``tag``)."""
    filters: dict = {}
    if q.get("api_key"):
        filters["api_key"] = _short(q["api_key"], "api_key", 32)
    if q.get("session"):
        filters["session_id"] = _short(q["session"], "session", 64)
    if q.get("tag"):
        filters["session_in"] = sessions_tagged(tenant=tenant, tag=tag_checked(q["tag"]))
    return filters


def _short(value: str, name: str, limit: int) -> str:
    if len(value) > limit:
        raise DomainError(f"{name}: at most {limit} characters", field=name)
    return value


def _own_format(view: Callable) -> Callable:
    view.content_negotiation_class = JsonOnly  # type: ignore[attr-defined]
    return view


@api_view(["GET"])
@_own_format
def usage(request: Request) -> Response | HttpResponse:
    q = request.query_params
    fmt = q.get("format") or "json"
    if fmt not in FORMATS:
        raise DomainError("format: json or csv", field="format")
    start, end = reports.parse_range(q.get("start"), q.get("end"), today=timezone.now().date())
    group_by = reports.parse_group_by(q.get("group_by"))
    reports.hourly_range_check(group_by, start, end)
    meters = reports.parse_meters(q.get("meter"))
    allow(request, "billing:GetUsageReport")
    tenant = tenant_of(request)
    report = reports.usage_report(
        tenant=tenant,
        start=start,
        end=end,
        group_by=group_by,
        meters=meters,
        **usage_filters(tenant, q),
    )
    if fmt == "csv":
        response = HttpResponse(report.as_csv(), content_type="text/csv; charset=utf-8")
        name = f"usage-{start.isoformat()}-{end.isoformat()}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    return Response(report.as_json())


@api_view(["GET"])
def usage_events(request: Request) -> Response:
    """Tinker's ``AdminClient.get_billing_usage``: hourly usage events of a window."""
    q = request.query_params
    start, end = events.window_checked(
        q.get("starting_on"), q.get("ending_before"), now=timezone.now()
    )
    allow(request, "billing:GetUsageReport")
    return Response(events.billing_usage(tenant=tenant_of(request), start=start, end=end))


@api_view(["GET"])
def storage_current(request: Request) -> Response:
    """Tinker's ``AdminClient.get_current_checkpoint_storage_usage``."""
    project = request.query_params.get("project_id") or None
    if project is not None and len(project) > 128:
        raise DomainError("project_id: at most 128 characters", field="project_id")
    allow(request, "billing:GetUsageReport")
    return Response(
        events.storage_now(tenant=tenant_of(request), project_id=project, now=timezone.now())
    )


@api_view(["GET"])
def invoice_preview(request: Request) -> Response:
    allow(request, "billing:GetInvoices")
    return Response(reports.invoice_preview(tenant=tenant_of(request), today=timezone.now().date()))


@api_view(["GET"])
def session_usage(request: Request, session_id: str) -> Response:
    tenant = tenant_of(request)
    allow(request, "sessions:DescribeTrainingSession", session_arn(tenant, session_id))
    session = sessions.session_get(tenant=tenant, session_id=session_id)
    return Response(reports.session_usage(tenant=tenant, session_id=session.id))


@api_view(["GET"])
def reconciliation(request: Request) -> Response:
    q = request.query_params
    start, end = reports.parse_range(q.get("start"), q.get("end"), today=timezone.now().date())
    allow(request, "billing:ManageBilling")
    report = billing_reconcile(
        datetime.combine(start, time.min, tzinfo=UTC),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
        tenant=tenant_of(request),
    )
    return Response(report.as_json(errors=False))
