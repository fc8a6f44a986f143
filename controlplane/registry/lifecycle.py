"""Checkpoint lifecycle: a checkpoint's expiry changed without loading it, and each group's
retention rule (keep the newest N versions' weights, keep approved ones); an approved version's
weights go only when its group's rule says approved ones are not kept."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint
from controlplane.training_sessions.services.retention import weights_delete

from .copies import MAX_TTL, MIN_TTL
from .models import ModelPackage, ModelPackageGroup, RetentionRule
from .selectors import group_get

log = logging.getLogger("loopwright.registry")

RETAIN_ACTION = "registry:ApplyRetentionRule"
MAX_KEEP_LAST = 100_000


def approved_kept(ckpt: Checkpoint) -> str | None:
    """Why ``ckpt`` is kept whatever its expiry: it is an approved version of a group whose
    rule keeps approved versions (every group without a rule does); else None."""
    for package in ModelPackage.objects.filter(
        checkpoint=ckpt, approval_status=ModelPackage.Approval.APPROVED
    ).select_related("group"):
        if _keeps_approved(package.group):
            return f"approved version {package.group.name}/{package.version}"
    return None


@transaction.atomic
def checkpoint_ttl_set(*, ckpt: Checkpoint, ttl_seconds: int | None) -> datetime | None:
    """Expire ``ckpt`` ``ttl_seconds`` from now (1 hour to 10 years), or never (None); its
    versions' expiry follows. Nothing is loaded or copied. The new expiry."""
    if ttl_seconds is not None and not MIN_TTL <= ttl_seconds <= MAX_TTL:
        raise DomainError(
            f"ttl_seconds: {ttl_seconds} is outside [{MIN_TTL}, {MAX_TTL}] (1 hour to 10 years)",
            field="ttl_seconds",
        )
    expires = None if ttl_seconds is None else timezone.now() + timedelta(seconds=ttl_seconds)
    Checkpoint.objects.filter(pk=ckpt.pk).update(expires_at=expires)  # what is stored is not
    ModelPackage.objects.filter(checkpoint=ckpt).update(expires_at=expires)
    ckpt.expires_at = expires
    return expires


def retention_get(*, tenant: Tenant, group_name: str) -> RetentionRule | None:
    return RetentionRule.objects.filter(group=group_get(tenant=tenant, name=group_name)).first()


@transaction.atomic
def retention_put(
    *, tenant: Tenant, actor: str, group_name: str, keep_last: int | None, keep_approved: bool
) -> RetentionRule:
    """Set the group's rule; it applies at the next housekeeping sweep."""
    if keep_last is not None and not 1 <= keep_last <= MAX_KEEP_LAST:
        raise DomainError(f"keep_last: from 1 to {MAX_KEEP_LAST}", field="keep_last")
    group = group_get(tenant=tenant, name=group_name)
    rule, _ = RetentionRule.objects.update_or_create(
        group=group,
        defaults={"keep_last": keep_last, "keep_approved": keep_approved, "updated_by": actor},
    )
    log.info("registry: retention of %s set by %s", group.name, actor)
    return rule


@transaction.atomic
def retention_delete(*, tenant: Tenant, actor: str, group_name: str) -> None:
    RetentionRule.objects.filter(group=group_get(tenant=tenant, name=group_name)).delete()


def retention_apply() -> list[str]:
    """Delete the weights every group's rule no longer keeps; their tinker paths."""
    gone = []
    rules = RetentionRule.objects.filter(keep_last__isnull=False).select_related("group__tenant")
    for rule in rules.order_by("id"):
        gone += _group_retain(rule.group, rule)
    return gone


def _group_retain(group: ModelPackageGroup, rule: RetentionRule) -> list[str]:
    newest = list(
        group.packages.order_by("-version").values_list("version", flat=True)[: rule.keep_last]
    )
    oldest_kept = min(newest) if newest else 0
    older = (
        group.packages.filter(version__lt=oldest_kept, checkpoint__isnull=False)
        .select_related("checkpoint__tenant")
        .order_by("version")
    )
    gone = []
    for package in older:
        if rule.keep_approved and package.approval_status == ModelPackage.Approval.APPROVED:
            continue
        ckpt = package.checkpoint
        if ckpt is None or _kept_elsewhere(ckpt, group):
            continue
        reason = (
            f"version {group.name}/{package.version} is older than the newest "
            f"{rule.keep_last} its group's retention rule keeps"
        )
        if weights_delete(ckpt, action=RETAIN_ACTION, reason=reason):
            gone.append(ckpt.tinker_path)
    return gone


def _kept_elsewhere(ckpt: Checkpoint, group: ModelPackageGroup) -> bool:
    """Whether another group's approved version holds the same weights and keeps them."""
    approved = ModelPackage.objects.filter(
        checkpoint=ckpt, approval_status=ModelPackage.Approval.APPROVED
    ).exclude(group=group)
    return any(_keeps_approved(p.group) for p in approved.select_related("group"))


def _keeps_approved(group: ModelPackageGroup) -> bool:
    rule = RetentionRule.objects.filter(group=group).first()
    return rule is None or rule.keep_approved
