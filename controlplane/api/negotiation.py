"""Which body format a client asked for: protobuf for the results tinker SDK ≥ 0.25 insists on,
JSON for everything else.

The views that can answer protobuf pick it themselves (an ``HttpResponse`` of the message);
everything else they answer, and every error, is rendered as JSON whatever ``Accept`` says
(the SDK reads try-again and error bodies as JSON), so DRF never answers 406.
"""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer

from loopwright.proto import PROTOBUF_MEDIA_TYPES

__all__ = ["PROTOBUF_CONTENT_TYPE", "AlwaysJSON", "accepts_json", "wants_protobuf"]

PROTOBUF_CONTENT_TYPE = "application/x-protobuf"
_JSON_RANGES = ("application/json", "application/x-ndjson", "application/*", "*/*")


def _ranges(request) -> list[tuple[str, float]]:
    """The media ranges of the ``Accept`` header with their quality (``q``)."""
    found = []
    for part in (request.META.get("HTTP_ACCEPT") or "").split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if not media:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        found.append((media.lower(), q))
    return found


def wants_protobuf(request) -> bool:
    """Whether ``Accept`` names a protobuf media type (with a quality above zero)."""
    return any(media in PROTOBUF_MEDIA_TYPES and q > 0 for media, q in _ranges(request))


def accepts_json(request) -> bool:
    """Whether a JSON body is acceptable: no ``Accept``, or one that allows JSON."""
    ranges = _ranges(request)
    return not ranges or any(media in _JSON_RANGES and q > 0 for media, q in ranges)


class AlwaysJSON(DefaultContentNegotiation):
    """Render every DRF response as JSON, whatever the client accepts."""

    def select_renderer(self, request, renderers, format_suffix=None):
        renderer = next((r for r in renderers if isinstance(r, JSONRenderer)), renderers[0])
        return renderer, renderer.media_type
