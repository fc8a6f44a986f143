"""The DRF throttle that applies the request-rate quota to authenticated API calls."""

from __future__ import annotations

from rest_framework.throttling import BaseThrottle

from .ratelimit import request_rate_check


class TenantRateThrottle(BaseThrottle):
    """Runs after authentication and permissions, before the view; a 429 is raised, not returned,
    so the answer has the API's error shape and Retry-After."""

    def allow_request(self, request, view) -> bool:
        tenant = getattr(request.user, "tenant", None)
        if tenant is not None:
            request_rate_check(tenant=tenant)
        return True
