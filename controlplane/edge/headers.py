"""The Content-Security-Policy of every answer: scripts, styles and everything else only from
the service itself (no inline script, no inline style, no ``eval``), no framing; Django's
SecurityMiddleware and XFrameOptionsMiddleware add the rest (docs/security.md, "Headers")."""

from __future__ import annotations

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",  # Swagger UI's icons are data: URLs in its stylesheet
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
