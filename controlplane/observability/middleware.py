"""Every request gets an id (the caller's ``X-Request-ID`` when it sends a sane one), echoed in
the response and bound to every log line written while it runs; and is counted and timed for
``/metrics`` by its URL pattern, never by its path (paths carry ids)."""

from __future__ import annotations

import re
import secrets
import time

import structlog

from controlplane import metrics

_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestIdMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        given = request.META.get("HTTP_X_REQUEST_ID", "")
        request_id = given if _SANE_ID.match(given) else secrets.token_hex(8)
        request.request_id = request_id
        # Cleared as each request starts, not as it ends: Django logs a 4xx or 5xx after the
        # middleware has returned, and that line must carry the id too.
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        match = getattr(request, "resolver_match", None)
        route = (match.route or match.view_name or "other") if match else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        metrics.HTTP_REQUESTS.labels(method, route, str(response.status_code)).inc()
        metrics.HTTP_SECONDS.labels(method, route).observe(time.perf_counter() - started)
        return response
