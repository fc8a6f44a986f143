"""The overview: live sessions, this month's tokens and cost, recent sessions and checkpoints, and
how to start when there is nothing yet. Each part shows only what the principal may read."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from controlplane.edge.callers import allow, may
from controlplane.fleet.selectors import served_base_models
from controlplane.iam.resources import role_arn, session_arn
from controlplane.iam.services import SESSION_ROLE_NAME
from controlplane.metering.reports import CURRENCY, money, usage_report

from .. import session_reads as reads
from ..login_required import page
from ..snippets import start_snippet

RECENT = 5


def _month(request: HttpRequest) -> dict | None:
    """This calendar month's tokens and cost by meter; None if the principal may not read them."""
    if not may(request, "billing:GetUsageReport"):
        return None
    today = timezone.now().date()
    report = usage_report(
        tenant=request.tenant, start=today.replace(day=1), end=today, group_by=("meter",)
    )
    return {
        "start": report.start,
        "end": report.end,
        "tokens": report.quantity,
        "cost": money(report.cost),
        "currency": CURRENCY.upper(),
        "meters": [(dict(line.key)["meter"], line.quantity) for line in report.lines],
    }


@page
def overview(request: HttpRequest) -> HttpResponse:
    tenant = request.tenant
    allow(request, "sessions:ListTrainingSessions")
    recent = reads.session_rows(tenant=tenant, limit=RECENT)
    checkpoints = (
        reads.checkpoint_rows(tenant=tenant, limit=RECENT)
        if may(request, "sessions:ListCheckpoints", session_arn(tenant, "*"))
        else None
    )
    base_models = (
        [m.name for m in served_base_models()] if may(request, "sessions:ListBaseModels") else []
    )
    base_url = request.build_absolute_uri("/").rstrip("/")
    return render(
        request,
        "web/overview/overview.html",
        {
            "live_count": reads.live_session_count(tenant=tenant),
            "session_total": reads.session_count(tenant=tenant),
            "recent": recent,
            "checkpoints": checkpoints,
            "month": _month(request),
            "base_models": base_models,
            "snippet": start_snippet(
                base_url=base_url,
                role_arn=role_arn(tenant, SESSION_ROLE_NAME),
                base_model=base_models[0] if base_models else None,
            ),
        },
    )


urlpatterns = [path("overview", overview, name="overview")]
