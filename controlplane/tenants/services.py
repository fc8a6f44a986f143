"""Writes for tenants and API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import ApiKey, Tenant

KEY_PREFIX = "tml-"  # the official tinker SDK only accepts keys that start with it


def key_digest(raw: str) -> str:
    return hmac.new(settings.SECRET_KEY.encode(), raw.encode(), hashlib.sha256).hexdigest()


def split_key(raw: str) -> str | None:
    """The visible prefix of a well-formed key, or None."""
    if not raw.startswith(KEY_PREFIX) or "." not in raw:
        return None
    return raw.split(".", 1)[0]


@transaction.atomic
def tenant_create(*, name: str) -> Tenant:
    return Tenant.objects.create(name=name)


def api_key_create(*, tenant: Tenant, name: str) -> tuple[ApiKey, str]:
    """Returns the key row and the raw key, which is shown once and never stored."""
    prefix = KEY_PREFIX + secrets.token_hex(6)
    raw = f"{prefix}.{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(tenant=tenant, name=name, prefix=prefix, digest=key_digest(raw))
    return key, raw


def api_key_touch(*, key: ApiKey) -> None:
    """Record use, at most once a minute per key (a write per request would be wasteful)."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
