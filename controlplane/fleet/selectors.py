"""Reads about base models and workers (not tenant data: any authenticated caller may read)."""

from __future__ import annotations

from .models import BaseModel
from .services import live_workers


def served_base_models() -> list[BaseModel]:
    """Base models at least one live worker serves, by name."""
    names = live_workers().values_list("base_model_id", flat=True).distinct()
    return list(BaseModel.objects.filter(name__in=names).order_by("name"))


def base_model_get(name: str) -> BaseModel | None:
    return BaseModel.objects.filter(name=name).first()
