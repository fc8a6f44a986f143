"""Request bodies at the edge: oversize ones refused up front with 413 and the limit, before
anything reads them; what a view left unread drained, so the connection serves the next
request."""

from __future__ import annotations

import json
import time

from django.conf import settings
from django.http import HttpResponse


class BodySizeLimitMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if _has_nul(request):
            from controlplane.edge.errors import api_bad_request

            return api_bad_request(request, "the path, query or headers contain NUL (%00)")
        limit = settings.MAX_REQUEST_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            from controlplane.edge.errors import api_too_large

            detail = f"request body of {length} bytes exceeds the limit of {limit} bytes"
            answer = api_too_large(request, detail)
            if answer is not None:
                return answer
            body = {"detail": detail, "code": "payload_too_large", "field": None}
            return HttpResponse(json.dumps(body), status=413, content_type="application/json")
        return self.get_response(request)


def _has_nul(request) -> bool:
    """Whether the path, the query or a header holds NUL, which no database column can store."""
    if "\x00" in request.path:
        return True
    if any("\x00" in k or any("\x00" in v for v in vs) for k, vs in request.GET.lists()):
        return True
    return any("\x00" in str(v) for k, v in request.META.items() if k.startswith("HTTP_"))


class ServerTimingMiddleware:
    """``Server-Timing: app;dur=<ms>`` on every response: time spent inside the application."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
        return response


DRAIN_CHUNK = 64 * 1024


class BodyDrainMiddleware:
    """Read and discard whatever of the request body the view left unread (one that answered
    without reading it: logout, client config, telemetry, a refusal before parsing), so a
    keep-alive connection is where the next request starts. gunicorn drains only 64 KiB itself
    and closes the connection past that. A body over ``MAX_REQUEST_BYTES`` is refused unread
    (413) and not drained: the server closes that connection instead."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        stream = getattr(request, "_stream", None)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if stream is not None and 0 < length <= settings.MAX_REQUEST_BYTES:
            try:
                while stream.read(DRAIN_CHUNK):
                    pass
            except OSError:  # the client went away: nothing left to keep
                pass
        return response
