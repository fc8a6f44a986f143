"""``checkpoints/search`` (tinker's ``search_checkpoints``, documented for SDK 0.39): the
account's checkpoints, newest first, a page at a time, by kind, base model and the
``user_metadata`` their save was given."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from controlplane.errors import DomainError
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint, Operation

from .session_reports import PROJECT_ID

__all__ = ["CheckpointSearchQuery", "checkpoint_search", "save_metadata"]

_SAVES = (Operation.Kind.SAVE_WEIGHTS, Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Owner(_Strict):
    type: Literal["own", "accessible"] = "own"


class _Cursor(_Strict):
    last_created_at: AwareDatetime
    last_checkpoint_id: int = Field(ge=0)


class CheckpointSearchQuery(_Strict):
    """Filters of a checkpoint search; every one given must hold."""

    project_ids: list[str] | None = Field(None, max_length=100)
    user_metadata: dict[str, str] = Field(default_factory=dict, max_length=50)
    checkpoint_type: Literal["training", "sampler"] | None = None
    owner: _Owner = _Owner()
    base_models: list[str] | None = Field(None, min_length=1, max_length=50)
    limit: int = Field(50, ge=1, le=200)
    cursor: _Cursor | None = None


def save_metadata(checkpoints: list[Checkpoint]) -> dict[str, dict]:
    """The ``user_metadata`` each checkpoint's save was given, by tinker path (one query)."""
    models = {c.model_id for c in checkpoints}
    found: dict[str, dict] = {}
    saves = Operation.objects.filter(model_id__in=models, kind__in=_SAVES, status="done")
    for payload, plan in saves.values_list("payload", "plan"):
        path = ((plan or {}).get("checkpoint") or {}).get("tinker_path")
        if path and (payload or {}).get("user_metadata"):
            found[path] = payload["user_metadata"]
    return found


def checkpoint_search(
    *, tenant: Tenant, query: CheckpointSearchQuery
) -> tuple[list[Checkpoint], dict[str, dict], dict | None]:
    """One page of the tenant's matching checkpoints, their save metadata, and the cursor of
    the next page (None at the end)."""
    if query.project_ids is not None and any(p != PROJECT_ID for p in query.project_ids):
        unknown = next(p for p in query.project_ids if p != PROJECT_ID)
        raise DomainError(f"project {unknown!r} not found", field="project_ids")
    found = Checkpoint.objects.filter(tenant=tenant).select_related("model")
    if query.checkpoint_type:
        found = found.filter(kind=query.checkpoint_type)
    if query.base_models:
        found = found.filter(base_model__in=query.base_models)
    if query.cursor:
        last = query.cursor.last_created_at
        found = found.filter(created_at__lte=last).exclude(
            created_at=last, id__gte=query.cursor.last_checkpoint_id
        )
    page: list[Checkpoint] = []
    metadata: dict[str, dict] = {}
    batch: list[Checkpoint] = []
    for ckpt in found.order_by("-created_at", "-id").iterator(chunk_size=200):
        batch.append(ckpt)
        if len(batch) == 200:
            _take(batch, query, page, metadata)
            batch = []
            if len(page) > query.limit:
                break
    if batch and len(page) <= query.limit:
        _take(batch, query, page, metadata)
    more = len(page) > query.limit
    page = page[: query.limit]
    cursor = (
        {"last_created_at": page[-1].created_at.isoformat(), "last_checkpoint_id": page[-1].id}
        if more
        else None
    )
    return page, metadata, cursor


def _take(
    batch: list[Checkpoint], query: CheckpointSearchQuery, page: list, metadata: dict
) -> None:
    saved = save_metadata(batch)
    for ckpt in batch:
        given = saved.get(ckpt.tinker_path) or {}
        if all(str(given.get(k)) == v for k, v in query.user_metadata.items()):
            page.append(ckpt)
            metadata[ckpt.tinker_path] = given
