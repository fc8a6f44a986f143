"""DRF authentication: an API key (``X-API-Key`` as tinker sends it, or ``Authorization: Bearer``
as openai does) or the dashboard's login session; either way the request's user is a Principal."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from controlplane import process_cache
from controlplane.tenants.models import Membership
from controlplane.tenants.services import key_digest

from . import credential_cache
from .principals import Principal, for_api_key, for_membership
from .selectors import api_key_for
from .services import api_key_touch

TENANT_HEADER = "X-Loopwright-Account"  # which of a logged-in user's tenants a call is for

__all__ = ["ApiKeyAuthentication", "LoginSessionAuthentication", "Principal"]


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        raw = request.headers.get("X-API-Key")
        if not raw:
            auth = request.headers.get("Authorization", "")
            if auth.lower().startswith("bearer "):
                raw = auth[7:].strip()
        if not raw:
            return None
        cacheable = process_cache.usable()
        if cacheable:
            digest = key_digest(raw)
            hit = credential_cache.cache.get(digest)
            if hit is not None:
                key, principal = hit
                api_key_touch(key=key)
                return principal, key
            generation = credential_cache.cache.generation
        key = api_key_for(raw)
        principal = for_api_key(key) if key is not None else None
        if principal is None:
            raise exceptions.AuthenticationFailed("invalid, revoked or expired API key")
        if cacheable:
            principal.policies()  # evaluated once, kept with the principal
            credential_cache.cache.put(digest, generation, key, principal)
        api_key_touch(key=key)
        return principal, key

    def authenticate_header(self, request) -> str:
        return "X-API-Key"


class LoginSessionAuthentication(authentication.SessionAuthentication):
    """A logged-in dashboard user, in the tenant the header names (else their first one)."""

    def authenticate(self, request):
        found = super().authenticate(request)  # enforces CSRF for unsafe methods
        if found is None:
            return None
        user = found[0]
        memberships = Membership.objects.select_related("tenant", "user").filter(user=user)
        account = request.headers.get(TENANT_HEADER)
        if account:
            memberships = memberships.filter(tenant__account_id=account)
        membership = memberships.order_by("created_at").first()
        if membership is None:
            raise exceptions.AuthenticationFailed("not a member of that account")
        return for_membership(membership), None
