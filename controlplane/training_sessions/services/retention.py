"""Checkpoints past their time-to-live (ephemeral sampler weights, saves with ttl_seconds) go."""

from __future__ import annotations

import logging

from django.utils import timezone

from controlplane.storage import StorageError, as_uri

from ..models import Checkpoint
from .storage import storage_at

log = logging.getLogger(__name__)


def checkpoints_expire(*, now=None) -> list[str]:
    """Delete expired checkpoints' stored objects and rows; returns their tinker paths.

    A checkpoint whose objects cannot be deleted now (storage unreachable) keeps its row, and
    the next sweep tries again.
    """
    now = now or timezone.now()
    gone = []
    for ckpt in Checkpoint.objects.filter(expires_at__lt=now):
        try:
            for where in (ckpt.storage_path, ckpt.merged_path):
                if where:
                    storage_at(as_uri(where)).delete()
        except StorageError:
            log.warning("could not delete %s; trying again later", ckpt.tinker_path, exc_info=True)
            continue
        gone.append(ckpt.tinker_path)
        ckpt.delete()
    return gone
