"""Reads for tenants and API keys."""

from __future__ import annotations

import hmac

from django.db.models import Q
from django.utils import timezone

from .models import ApiKey
from .services import key_digest, split_key


def api_key_for(raw: str) -> ApiKey | None:
    """The live key matching ``raw``, compared in constant time; None if unknown or dead."""
    prefix = split_key(raw)
    if prefix is None:
        return None
    now = timezone.now()
    key = (
        ApiKey.objects.select_related("tenant")
        .filter(prefix=prefix, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if key is None or not hmac.compare_digest(key.digest, key_digest(raw)):
        return None
    return key
