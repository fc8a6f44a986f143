"""What ``/v1/models`` lists: every name the tenant can sample from, and only the tenant's."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from controlplane.completions.errors import ModelNotFound
from controlplane.operations.admission import OPEN_STATES
from controlplane.registry.models import ModelPackage
from controlplane.registry.services import package_arn
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import (
    Checkpoint,
    SamplingSession,
    Session,
    TrainingModel,
)

LIMIT = 500  # of each kind, newest first


def _entry(
    tenant: Tenant, name: str, created: datetime, root: str, kind: str, parent: str | None
) -> dict:
    """An OpenAI model object; ``root`` is the base model, ``kind`` what the name refers to."""
    return {
        "id": name,
        "object": "model",
        "created": int(created.timestamp()),
        "owned_by": tenant.account_id,
        "root": root,
        "parent": parent,
        "kind": kind,
    }


def models_list(*, tenant: Tenant) -> list[dict]:
    samplers = list(
        SamplingSession.objects.filter(tenant=tenant, session__state__in=OPEN_STATES).order_by(
            "-created_at"
        )[:LIMIT]
    )
    models = list(
        TrainingModel.objects.filter(
            tenant=tenant, session__state__in=OPEN_STATES, state=TrainingModel.State.READY
        ).order_by("-created_at")[:LIMIT]
    )
    # sessions with something to sample (a sampler, or a ready model), with its base model
    roots: dict[str, str] = {}
    for item in [*models, *samplers]:  # newest first within each: the first seen wins
        roots.setdefault(item.session_id, item.base_model)
    sessions = Session.objects.filter(tenant=tenant, id__in=roots).order_by("-created_at")
    out = [_entry(tenant, s.id, s.created_at, roots[s.id], "session", None) for s in sessions]
    for s in samplers:
        parent = s.live_model_id or s.model_path or None
        out.append(_entry(tenant, s.id, s.created_at, s.base_model, "sampler", parent))
    for m in models:
        out.append(_entry(tenant, m.id, m.created_at, m.base_model, "model", m.session_id))
    unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    for c in Checkpoint.objects.filter(unexpired, tenant=tenant).order_by("-created_at")[:LIMIT]:
        out.append(
            _entry(tenant, c.tinker_path, c.created_at, c.base_model, "checkpoint", c.model_id)
        )
    packages = (
        ModelPackage.objects.filter(tenant=tenant, checkpoint__isnull=False)
        .select_related("group", "tenant")
        .order_by("-created_at")[:LIMIT]
    )
    for p in packages:
        out.append(
            _entry(
                tenant, package_arn(p), p.created_at, p.base_model, "model_package", p.tinker_path
            )
        )
    return out


def model_get(*, tenant: Tenant, name: str) -> dict:
    """The listed model called ``name``; any other name (another tenant's too) is not found."""
    for entry in models_list(tenant=tenant):
        if entry["id"] == name:
            return entry
    raise ModelNotFound(name)
