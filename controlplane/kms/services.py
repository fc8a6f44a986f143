"""Writes of KMS keys (create, state changes, rotation, purge) and the sealing of checkpoints.

Services trust their caller to have authorized ``actor``; they log every change with it.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.errors import Conflict, DomainError, NotFound
from controlplane.tenants.models import Tenant

from . import providers
from .keyring import new_key_material, rotate_local_key
from .models import KmsKey, KmsKeyVersion
from .selectors import key_list as _key_list
from .selectors import key_ref, key_resolve

__all__ = [
    "KmsUnavailable",
    "default_key_for",
    "key_cancel_deletion",
    "key_create",
    "key_disable",
    "key_enable",
    "key_list",
    "key_ref",
    "key_resolve",
    "key_rotate",
    "key_schedule_deletion",
    "keys_purge",
    "load_sealing",
    "save_sealing",
    "sealing_context",
    "session_key",
]

log = logging.getLogger("loopwright.kms")

ALIAS_PATTERN = r"alias/[A-Za-z0-9/_-]{1,250}"
ALIAS_RE = re.compile(rf"^{ALIAS_PATTERN}$")
RESERVED_ALIAS_PREFIX = "alias/aws/"
DEFAULT_ALIAS = "alias/loopwright/checkpoints"
MAX_DESCRIPTION = 8192
MAX_AWS_KEY_ID = 2048
MIN_WINDOW_DAYS, MAX_WINDOW_DAYS, DEFAULT_WINDOW_DAYS = 7, 30, 30
SYSTEM_ACTOR = "system:loopwright"

State = KmsKey.State


class KmsUnavailable(DomainError):
    """AWS KMS could not be reached (network, credentials): nothing was changed."""

    status = 503
    code = "kms_unavailable"
    retry_after = 30


def _account(tenant: Tenant) -> str:
    """The tenant's 12-digit account id (derived from its UUID where it has none)."""
    account = getattr(tenant, "account_id", None)
    if account:
        return str(account)
    return str(int(tenant.id.hex[:12], 16) % 10**12).zfill(12)


def _arn(tenant: Tenant, key_id: uuid.UUID) -> str:
    return f"arn:loopwright:kms::{_account(tenant)}:key/{key_id}"


def _audit(action: str, key: KmsKey, actor: str) -> None:
    log.info("kms:%s %s by %s", action, key.arn, actor)


# -- reads ------------------------------------------------------------------------------------
def key_list(*, tenant: Tenant, actor: str) -> list[KmsKey]:
    return _key_list(tenant=tenant)


# -- create -----------------------------------------------------------------------------------
def key_create(
    *,
    tenant: Tenant,
    actor: str,
    description: str = "",
    alias: str | None = None,
    provider: str = "local",
    aws_key_id: str | None = None,
) -> KmsKey:
    """A new Enabled key. An AWS key without ``aws_key_id`` is created in AWS KMS first."""
    description = _check_description(description)
    if alias is not None:
        _check_alias(tenant, alias)
    if provider not in KmsKey.Provider.values:
        raise DomainError(
            f"provider: one of {', '.join(KmsKey.Provider.values)}, not {provider!r}",
            field="provider",
        )
    key_id = uuid.uuid4()
    arn = _arn(tenant, key_id)
    if provider == KmsKey.Provider.AWS:
        aws_key_id = _aws_key(aws_key_id, arn=arn, description=description)
    elif aws_key_id is not None:
        raise DomainError("aws_key_id: only keys with provider aws have one", field="aws_key_id")
    key = _insert(
        tenant,
        key_id=key_id,
        arn=arn,
        alias=alias,
        description=description,
        provider=provider,
        aws_key_id=aws_key_id or "",
    )
    _audit("CreateKey", key, actor)
    return key


def _insert(tenant: Tenant, *, key_id: uuid.UUID, arn: str, **fields: Any) -> KmsKey:
    local = fields["provider"] == KmsKey.Provider.LOCAL
    try:
        with transaction.atomic():
            key = KmsKey.objects.create(
                id=key_id, tenant=tenant, arn=arn, current_version=1 if local else 0, **fields
            )
            if local:
                material = new_key_material(providers.master_key(), key_arn=arn, version=1)
                KmsKeyVersion.objects.create(key=key, version=1, material=material)
    except IntegrityError:
        alias = fields.get("alias")
        if alias and KmsKey.objects.filter(tenant=tenant, alias=alias).exists():
            raise Conflict(f"alias: {alias} already names another key", field="alias") from None
        raise
    return key


def _check_description(description: str) -> str:
    if not isinstance(description, str):
        raise DomainError("description: must be a string", field="description")
    if len(description) > MAX_DESCRIPTION:
        raise DomainError(
            f"description: at most {MAX_DESCRIPTION} characters (got {len(description)})",
            field="description",
        )
    return description


def _check_alias(tenant: Tenant, alias: str) -> None:
    if not isinstance(alias, str) or not ALIAS_RE.match(alias):
        raise DomainError(
            f"alias: must match {ALIAS_PATTERN} (alias/ then 1–250 letters, digits, '/', '_' "
            "or '-')",
            field="alias",
        )
    if alias.startswith(RESERVED_ALIAS_PREFIX):
        raise DomainError(
            f"alias: the prefix {RESERVED_ALIAS_PREFIX} is reserved for AWS managed keys",
            field="alias",
        )
    if KmsKey.objects.filter(tenant=tenant, alias=alias).exists():
        raise Conflict(f"alias: {alias} already names another key", field="alias")


def _aws_key(aws_key_id: str | None, *, arn: str, description: str) -> str:
    """The AWS KMS key id to use: the given one once AWS confirms it, or a key created now."""
    if aws_key_id is None:
        meta = _aws_call(
            "create_key",
            "provider",
            Description=description or f"Loopwright key {arn}",
            KeyUsage="ENCRYPT_DECRYPT",
            KeySpec="SYMMETRIC_DEFAULT",
            Tags=[{"TagKey": "loopwright:arn", "TagValue": arn}],
        )["KeyMetadata"]
        return str(meta["KeyId"])
    if not isinstance(aws_key_id, str) or not 1 <= len(aws_key_id) <= MAX_AWS_KEY_ID:
        raise DomainError(
            f"aws_key_id: a key id or ARN of 1–{MAX_AWS_KEY_ID} characters", field="aws_key_id"
        )
    meta = _aws_call("describe_key", "aws_key_id", KeyId=aws_key_id)["KeyMetadata"]
    if (
        meta.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT"
        or meta.get("KeyUsage", "ENCRYPT_DECRYPT") != "ENCRYPT_DECRYPT"
    ):
        raise DomainError(
            f"aws_key_id: {aws_key_id} is not a symmetric encryption key (KeySpec "
            f"{meta.get('KeySpec')}, KeyUsage {meta.get('KeyUsage')})",
            field="aws_key_id",
        )
    return str(meta["KeyId"])


def _aws_call(operation: str, field: str, **params: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return getattr(providers.aws_client(), operation)(**params)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise DomainError(
            f"{field}: AWS KMS {operation} failed: {error.get('Code', '')}: "
            f"{error.get('Message', '')}",
            field=field,
        ) from exc
    except BotoCoreError as exc:
        raise KmsUnavailable(f"AWS KMS {operation} failed: {exc}", field=field) from exc


# -- state ------------------------------------------------------------------------------------
def _change(
    tenant: Tenant, key_id: str, actor: str, action: str, apply: Callable[[KmsKey], None]
) -> KmsKey:
    with transaction.atomic():
        key = KmsKey.objects.select_for_update().get(pk=key_resolve(tenant=tenant, ref=key_id).pk)
        apply(key)
        key.save()
    _audit(action, key, actor)
    return key


def _refuse_pending(key: KmsKey, doing: str) -> None:
    if key.state == State.PENDING_DELETION:
        raise Conflict(
            f"key {key.arn} is PendingDeletion; cancel the deletion before you {doing} it",
            field="key_id",
        )


def key_disable(*, tenant: Tenant, actor: str, key_id: str) -> KmsKey:
    def apply(key: KmsKey) -> None:
        _refuse_pending(key, "disable")
        key.state = State.DISABLED

    return _change(tenant, key_id, actor, "DisableKey", apply)


def key_enable(*, tenant: Tenant, actor: str, key_id: str) -> KmsKey:
    def apply(key: KmsKey) -> None:
        _refuse_pending(key, "enable")
        key.state = State.ENABLED

    return _change(tenant, key_id, actor, "EnableKey", apply)


def key_schedule_deletion(
    *, tenant: Tenant, actor: str, key_id: str, pending_window_days: int = DEFAULT_WINDOW_DAYS
) -> KmsKey:
    """After ``pending_window_days`` the key and its material go, with all it sealed."""
    days = pending_window_days
    if (
        isinstance(days, bool)
        or not isinstance(days, int)
        or not (MIN_WINDOW_DAYS <= days <= MAX_WINDOW_DAYS)
    ):
        raise DomainError(
            f"pending_window_days: an integer from {MIN_WINDOW_DAYS} to {MAX_WINDOW_DAYS}, "
            f"not {days!r}",
            field="pending_window_days",
        )

    def apply(key: KmsKey) -> None:
        if key.state == State.PENDING_DELETION:
            raise Conflict(
                f"key {key.arn} is already pending deletion (on {key.deletion_date:%Y-%m-%d})",
                field="key_id",
            )
        key.state = State.PENDING_DELETION
        key.deletion_date = timezone.now() + timedelta(days=days)

    return _change(tenant, key_id, actor, "ScheduleKeyDeletion", apply)


def key_cancel_deletion(*, tenant: Tenant, actor: str, key_id: str) -> KmsKey:
    """The key stays, Disabled (as in AWS KMS); enable it to use it again."""

    def apply(key: KmsKey) -> None:
        if key.state != State.PENDING_DELETION:
            raise Conflict(f"key {key.arn} is {key.state}, not pending deletion", field="key_id")
        key.state = State.DISABLED
        key.deletion_date = None

    return _change(tenant, key_id, actor, "CancelKeyDeletion", apply)


def key_rotate(*, tenant: Tenant, actor: str, key_id: str) -> KmsKey:
    """New material for what is sealed from now on; older versions keep opening what they sealed."""

    def apply(key: KmsKey) -> None:
        if key.state != State.ENABLED:
            raise Conflict(
                f"key {key.arn} is {key.state}; only an Enabled key rotates", field="key_id"
            )
        if key.provider == KmsKey.Provider.AWS:
            _aws_call("rotate_key_on_demand", "key_id", KeyId=key.aws_key_id)
        else:
            rotated = rotate_local_key(key_ref(key), providers.master_key())
            version = rotated.current_version
            KmsKeyVersion.objects.create(
                key=key, version=version, material=rotated.versions[version]
            )
            key.current_version = version
        key.rotated_at = timezone.now()

    return _change(tenant, key_id, actor, "RotateKey", apply)


def keys_purge(*, now: datetime | None = None) -> list[str]:
    """Delete keys whose deletion date has passed, material included; returns their ARNs.

    What they sealed can never be opened again. AWS keys are only forgotten here: their
    material stays under the AWS account's own key policy and deletion schedule.
    """
    due = KmsKey.objects.filter(
        state=State.PENDING_DELETION, deletion_date__lte=now or timezone.now()
    )
    gone = []
    for key in due:
        gone.append(key.arn)
        key.delete()
        _audit("DeleteKey", key, SYSTEM_ACTOR)
    return gone


# -- checkpoints ------------------------------------------------------------------------------
def default_key_for(tenant: Tenant) -> KmsKey:
    """The tenant's default key, ``alias/loopwright/checkpoints``, created on first use."""
    key = KmsKey.objects.filter(tenant=tenant, is_default=True).first()
    if key is not None:
        return key
    try:
        with transaction.atomic():
            named = KmsKey.objects.filter(tenant=tenant, alias=DEFAULT_ALIAS).first()
            if named is not None:
                named.is_default = True
                named.save(update_fields=["is_default", "updated_at"])
                return named
            key_id = uuid.uuid4()
            key = _insert(
                tenant,
                key_id=key_id,
                arn=_arn(tenant, key_id),
                alias=DEFAULT_ALIAS,
                description="Default key for checkpoints",
                provider=KmsKey.Provider.LOCAL,
                is_default=True,
            )
    except (IntegrityError, Conflict):  # created at the same moment by another request
        return KmsKey.objects.get(tenant=tenant, is_default=True)
    _audit("CreateKey", key, SYSTEM_ACTOR)
    return key


def _require_enabled(key: KmsKey, *, field: str | None, doing: str) -> KmsKey:
    if key.state != State.ENABLED:
        raise DomainError(
            f"KMS key {key.arn} is {key.state}: {doing} needs an Enabled key", field=field
        )
    return key


def session_key(*, tenant: Tenant, ref: str) -> KmsKey:
    """The key a new session names (``kms_key_arn``): the tenant's, and Enabled."""
    key = key_resolve(tenant=tenant, ref=ref, field="kms_key_arn")
    return _require_enabled(key, field="kms_key_arn", doing="encrypting checkpoints")


def sealing_context(tenant: Tenant, resource: str) -> dict[str, str]:
    """The encryption context a blob of ``tenant``'s named ``resource`` is sealed under."""
    return {"tenant": _account(tenant), "resource": resource}


def _sealing(tenant: Tenant, key: KmsKey, resource: str) -> dict:
    return {"key_arn": key.arn, "context": sealing_context(tenant, resource)}


def save_sealing(*, tenant: Tenant, key_arn: str | None, resource: str) -> dict:
    """What a worker needs to seal checkpoint ``resource``: the key (the session's, or the
    tenant's default) and the encryption context."""
    if key_arn:
        key = key_resolve(tenant=tenant, ref=key_arn, field="kms_key_arn")
    else:
        key = default_key_for(tenant)
    _require_enabled(key, field="kms_key_arn", doing=f"saving {resource}")
    return _sealing(tenant, key, resource)


def load_sealing(*, tenant: Tenant, key_arn: str, resource: str, field: str) -> dict:
    """What a worker needs to open checkpoint ``resource``, sealed with ``key_arn``."""
    try:
        key = key_resolve(tenant=tenant, ref=key_arn, field=field)
    except NotFound:
        raise DomainError(
            f"{resource} was sealed with KMS key {key_arn}, which has been deleted: it can no "
            "longer be opened",
            field=field,
        ) from None
    _require_enabled(key, field=field, doing=f"opening {resource}")
    return _sealing(tenant, key, resource)
