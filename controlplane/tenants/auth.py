"""DRF authentication by API key: ``X-API-Key`` (tinker) or ``Authorization: Bearer`` (openai)."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions

from .models import ApiKey, Tenant
from .selectors import api_key_for
from .services import api_key_touch


@dataclass(frozen=True)
class Principal:
    """Who is calling: for now an API key of a tenant."""

    tenant: Tenant
    api_key: ApiKey

    @property
    def is_authenticated(self) -> bool:
        return True


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        raw = request.headers.get("X-API-Key")
        if not raw:
            auth = request.headers.get("Authorization", "")
            if auth.lower().startswith("bearer "):
                raw = auth[7:].strip()
        if not raw:
            return None
        key = api_key_for(raw)
        if key is None:
            raise exceptions.AuthenticationFailed("invalid, revoked or expired API key")
        api_key_touch(key=key)
        return Principal(tenant=key.tenant, api_key=key), key

    def authenticate_header(self, request) -> str:
        return "X-API-Key"
