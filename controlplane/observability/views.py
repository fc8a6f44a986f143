"""``GET /metrics``: the process's metrics and the database's, in Prometheus' text format.

Two guards, either or both, and with neither it answers nobody (docs: infra/README.md,
"Metrics"): ``LOOPWRIGHT_METRICS_TOKEN`` (the scraper sends ``Authorization: Bearer <token>``; the
embedded default makes one) and ``LOOPWRIGHT_METRICS_PORT`` (answered only on requests that arrive
on that port, one gunicorn also binds and the load balancer does not forward). A refused scrape
gets the 404 any unknown path gets.
"""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)

from .collectors import DatabaseCollector


def _allowed(request: HttpRequest) -> bool:
    port = settings.METRICS_PORT
    if port and request.META.get("SERVER_PORT") != str(port):
        return False
    token = settings.METRICS_TOKEN
    if token:
        sent = request.META.get("HTTP_AUTHORIZATION", "")
        return hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())
    return bool(port)


def _process_registry() -> CollectorRegistry:
    """This process's metrics, or with ``PROMETHEUS_MULTIPROC_DIR`` those of every gunicorn
    worker process, added up."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        raise Http404
    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector())
    body = generate_latest(_process_registry()) + generate_latest(database)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
