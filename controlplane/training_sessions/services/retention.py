"""Checkpoints past their time-to-live (ephemeral sampler weights, saves with ttl_seconds) go."""

from __future__ import annotations

import shutil

from django.utils import timezone

from ..models import Checkpoint


def checkpoints_expire(*, now=None) -> list[str]:
    """Delete expired checkpoints' files and rows; returns their tinker paths."""
    now = now or timezone.now()
    gone = []
    for ckpt in Checkpoint.objects.filter(expires_at__lt=now):
        for folder in (ckpt.storage_path, ckpt.merged_path):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        gone.append(ckpt.tinker_path)
        ckpt.delete()
    return gone
