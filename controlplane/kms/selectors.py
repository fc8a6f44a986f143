"""Reads of KMS keys, always within one tenant: a missing key and another tenant's look the same."""

from __future__ import annotations

import uuid
from typing import cast

from controlplane.errors import NotFound
from controlplane.tenants.models import Tenant

from .keyring import KeyNotFoundError, KeyRef, KeyState, ProviderName
from .models import KmsKey

MAX_REF_LENGTH = 2048


def key_list(*, tenant: Tenant) -> list[KmsKey]:
    return list(KmsKey.objects.filter(tenant=tenant).order_by("created_at", "id"))


def key_resolve(*, tenant: Tenant, ref: str, field: str = "key_id") -> KmsKey:
    """The tenant's key named by its id (a UUID), its ARN or its alias (``alias/...``)."""
    key = None
    if isinstance(ref, str) and 0 < len(ref) <= MAX_REF_LENGTH:
        keys = KmsKey.objects.filter(tenant=tenant)
        if ref.startswith("arn:"):
            key = keys.filter(arn=ref).first()
        elif ref.startswith("alias/"):
            key = keys.filter(alias=ref).first()
        else:
            try:
                key = keys.filter(id=uuid.UUID(ref)).first()
            except ValueError:
                key = None
    if key is None:
        shown = ref[:300] if isinstance(ref, str) else ref
        raise NotFound(f"KMS key {shown!r} not found", field=field)
    return key


def key_ref(key: KmsKey) -> KeyRef:
    """What the envelope code needs to know about ``key``: its state and wrapped material."""
    versions: dict[int, bytes] = {}
    if key.provider == KmsKey.Provider.LOCAL:
        versions = {v.version: bytes(v.material) for v in key.versions.all()}
    return KeyRef(
        arn=key.arn,
        provider=cast(ProviderName, key.provider),
        state=cast(KeyState, key.state),
        current_version=key.current_version,
        versions=versions,
        aws_key_id=key.aws_key_id or None,
    )


def key_ref_by_arn(*, tenant_id: uuid.UUID | str, arn: str) -> KeyRef:
    """The tenant's key ``arn`` as a KeyRef; ``KeyNotFoundError`` if it has no such key."""
    key = KmsKey.objects.filter(tenant_id=tenant_id, arn=arn).first()
    if key is None:
        raise KeyNotFoundError(f"key {arn} does not exist (it may have been deleted)")
    return key_ref(key)
