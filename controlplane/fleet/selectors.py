"""Reads about base models and workers (not tenant data: any authenticated caller may read)."""

from __future__ import annotations

from controlplane.errors import NotFound, shown

from .models import BaseModel
from .services import live_workers


def served_base_models() -> list[BaseModel]:
    """Base models at least one live worker serves, by name; without their tokenizer files
    (megabytes of JSON a base model's row carries, read only when asked for)."""
    names = live_workers().values_list("base_model_id", flat=True).distinct()
    rows = BaseModel.objects.filter(name__in=names).defer("tokenizer_files")
    return list(rows.order_by("name"))


def base_model_get(name: str) -> BaseModel | None:
    return BaseModel.objects.filter(name=name).first()


class UnknownBaseModel(NotFound):
    """A base model no worker has ever served (a typo, most likely): not worth waiting for."""

    code = "base_model_not_found"


def base_model_require(name: str, *, field: str = "base_model") -> None:
    """Refuse a base model no worker has ever served, naming it and what is served now. One a
    worker has served but none serves right now is known: its models and samplers wait."""
    if BaseModel.objects.filter(name=name).exists():
        return
    served = ", ".join(m.name for m in served_base_models()) or "none right now"
    raise UnknownBaseModel(
        f"base model {shown(name)} is not served here; served: {served}", field=field
    )
