"""Reads of roles, policies and API keys, always within one tenant (another tenant's role or key
is not found); and the live key a raw API key names."""

from __future__ import annotations

import hmac
import re

from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.errors import NotFound
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import key_digests

from .arns import Arn, ArnError
from .models import ApiKey, Role

ROLE_NAME = re.compile(r"^[A-Za-z0-9+=,.@_-]{1,64}$")
KEY_PREFIX = "tml-"  # the official tinker SDK only accepts keys that start with it


def roles(*, tenant: Tenant) -> QuerySet[Role]:
    return Role.objects.filter(tenant=tenant).select_related("tenant").order_by("name")


def role_get(*, tenant: Tenant, name: str, field: str = "role") -> Role:
    found = roles(tenant=tenant).filter(name=name).first()
    if found is None:
        raise NotFound(f"{field}: no role {name!r}", field=field)
    return found


def role_by_arn(*, tenant: Tenant, arn: str, field: str = "role_arn") -> Role:
    """The tenant's role with this ARN; a malformed ARN or another account's is not found."""
    try:
        parsed = Arn.parse(arn)
    except ArnError:
        raise NotFound(f"{field}: no role {arn!r}", field=field) from None
    if (
        parsed.service != "iam"
        or parsed.resource_type != "role"
        or parsed.account != tenant.account_id
    ):
        raise NotFound(f"{field}: no role {arn!r}", field=field)
    return role_get(tenant=tenant, name=parsed.resource_id, field=field)


def split_key(raw: str) -> str | None:
    """The visible prefix of a well-formed key, or None."""
    if not raw.startswith(KEY_PREFIX) or "." not in raw:
        return None
    return raw.split(".", 1)[0]


def api_key_live(*, prefix: str, tenant_id) -> ApiKey | None:
    """The tenant's key ``prefix`` if it is neither revoked nor expired."""
    return (
        ApiKey.objects.select_related("tenant", "role", "role__tenant")
        .filter(prefix=prefix, tenant_id=tenant_id, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .first()
    )


def api_key_for(raw: str) -> ApiKey | None:
    """The live key matching ``raw``, compared in constant time; None if unknown or dead."""
    prefix = split_key(raw)
    if prefix is None:
        return None
    now = timezone.now()
    key = (
        ApiKey.objects.select_related("tenant", "role", "role__tenant")
        .filter(prefix=prefix, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if key is None:
        return None
    current, *earlier = key_digests(raw)
    if hmac.compare_digest(key.digest, current):
        return key
    if any(hmac.compare_digest(key.digest, digest) for digest in earlier):
        # stored under a secret being rotated out: from now on under the current one
        ApiKey.objects.filter(pk=key.pk, digest=key.digest).update(digest=current)
        key.digest = current
        return key
    return None


def api_keys(*, tenant: Tenant) -> QuerySet[ApiKey]:
    return (
        ApiKey.objects.filter(tenant=tenant)
        .select_related("user", "role", "role__tenant")
        .order_by("-created_at")
    )


def api_key_get(*, tenant: Tenant, prefix: str) -> ApiKey:
    found = api_keys(tenant=tenant).filter(prefix=prefix).first()
    if found is None:
        raise NotFound(f"no API key {prefix!r}", field="prefix")
    return found
