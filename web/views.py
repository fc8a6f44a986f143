"""Pages. The status page shows what the service can do right now; it shows no tenant's data."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.fleet.models import Worker
from controlplane.fleet.selectors import served_base_models
from controlplane.fleet.services import live_workers


def status(request: HttpRequest) -> HttpResponse:
    live = list(live_workers().select_related("base_model").order_by("name"))
    return render(
        request,
        "web/status.html",
        {
            "workers": live,
            "base_models": served_base_models(),
            "gone": Worker.objects.exclude(pk__in=[w.pk for w in live]).count(),
            "api_url": request.build_absolute_uri("/api/v1/"),
        },
    )
