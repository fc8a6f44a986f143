"""Checkpoints past their time-to-live go: their stored objects are deleted (local or S3), then
their row, with an audit event; a checkpoint the registry protects (an approved version), or one
whose store cannot be reached now, stays for a later sweep."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.utils import timezone

from controlplane.audit.services import audit_system
from controlplane.iam.resources import checkpoint_arn
from controlplane.storage import StorageError, as_uri

from ..models import Checkpoint
from .storage import storage_at

log = logging.getLogger(__name__)

EXPIRE_ACTION = "sessions:ExpireCheckpoint"

# Why the registry keeps a checkpoint whatever its expiry says (an approved version), or None.
# The registry sits above this app and hands its rule over when it is ready.
Protection = Callable[[Checkpoint], str | None]
_protection: Protection = lambda ckpt: None  # noqa: E731 — until the registry sets its rule


def protection_from(rule: Protection) -> None:
    global _protection
    _protection = rule


def weights_delete(ckpt: Checkpoint, *, action: str, reason: str) -> bool:
    """Delete the checkpoint's stored objects, then its row, with an audit event saying
    ``reason``; False (nothing deleted) when the store cannot be reached now."""
    try:
        for where in (ckpt.storage_path, ckpt.merged_path):
            if where:
                storage_at(as_uri(where)).delete()
    except StorageError:
        log.warning("could not delete %s; trying again later", ckpt.tinker_path, exc_info=True)
        return False
    audit_system(
        tenant=ckpt.tenant,
        action=action,
        resource=checkpoint_arn(ckpt.tenant, ckpt.model_id, ckpt.name),
        reason=f"{ckpt.tinker_path}: {reason}"[:1000],
    )
    ckpt.delete()
    return True


def checkpoints_expire(*, now=None) -> list[str]:
    """Delete expired checkpoints' stored objects and rows; returns their tinker paths."""
    now = now or timezone.now()
    gone = []
    expired = Checkpoint.objects.filter(expires_at__lt=now).select_related("tenant")
    for ckpt in expired.order_by("expires_at", "id"):
        if _protection(ckpt) is not None:
            continue
        when = ckpt.expires_at.isoformat() if ckpt.expires_at else "?"
        if weights_delete(ckpt, action=EXPIRE_ACTION, reason=f"expired at {when}"):
            gone.append(ckpt.tinker_path)
    return gone
