"""Refuse oversize request bodies up front with 413 and the limit, before anything reads them."""

from __future__ import annotations

import json
import time

from django.conf import settings
from django.http import HttpResponse


class BodySizeLimitMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.MAX_REQUEST_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            body = {
                "detail": f"request body of {length} bytes exceeds the limit of {limit} bytes",
                "code": "payload_too_large",
                "field": None,
            }
            return HttpResponse(json.dumps(body), status=413, content_type="application/json")
        return self.get_response(request)


class ServerTimingMiddleware:
    """``Server-Timing: app;dur=<ms>`` on every response: time spent inside the application."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
        return response
