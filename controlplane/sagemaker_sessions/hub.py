"""The SageMaker Public Hub as Loopwright answers it: one ``Model`` entry per base model the
workers serve, carrying the training-session capability keyword and the model's id, so
``sagemaker-train``'s ``list_base_models()`` and its name → ARN resolution work unchanged.

ARNs keep AWS's resource layout (``hub-content/<hub>/Model/<name>/<version>``, which the SDK
splits on ``/``) under Loopwright's partition: ``arn:loopwright:sagemaker:<region>:aws:…``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from controlplane.fleet.models import BaseModel
from controlplane.fleet.selectors import served_base_models

HUB_NAME = "SageMakerPublicHub"
CONTENT_VERSION = "1.0.0"
SCHEMA_VERSION = "2.0.0"
CAPABILITY = "@capability:training_session"
MODEL_ID_KEYWORD = "@huggingface-id:"
_NOT_NAME = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class HubModel:
    base_model: str  # Loopwright's name, e.g. HuggingFaceTB/SmolLM2-135M-Instruct
    content_name: str  # the Hub's, e.g. huggingfacetb-smollm2-135m-instruct
    description: str
    context_length: int
    updated_at: datetime


def content_name_of(base_model: str) -> str:
    """A base model's Hub content name: lower-case letters, digits and single hyphens, ≤ 63."""
    name = _NOT_NAME.sub("-", base_model.lower()).strip("-")[:63].rstrip("-")
    return name or "model"


def _hub_model(row: BaseModel) -> HubModel:
    return HubModel(
        base_model=row.name,
        content_name=content_name_of(row.name),
        description=row.description or f"{row.name}, trainable with LoRA in training sessions",
        context_length=row.context_length,
        updated_at=row.updated_at,
    )


def hub_models() -> list[HubModel]:
    """The served base models, by content name (the first name wins a clash)."""
    found: dict[str, HubModel] = {}
    for row in served_base_models():
        model = _hub_model(row)
        found.setdefault(model.content_name, model)
    return sorted(found.values(), key=lambda m: m.content_name)


def hub_arn() -> str:
    return f"arn:loopwright:sagemaker:{settings.AWS_REGION}:aws:hub/{HUB_NAME}"


def content_arn(name: str, version: str = CONTENT_VERSION) -> str:
    region = settings.AWS_REGION
    return f"arn:loopwright:sagemaker:{region}:aws:hub-content/{HUB_NAME}/Model/{name}/{version}"


def is_public_hub(name_or_arn: str) -> bool:
    """The Public Hub, named by its name or any ARN of it (``…:hub/SageMakerPublicHub``)."""
    return name_or_arn == HUB_NAME or name_or_arn.endswith(f":hub/{HUB_NAME}")


def document(model: HubModel) -> str:
    """``HubContentDocument``: the fields the SDK reads (``HuggingfaceId``) and more."""
    return json.dumps(
        {
            "HuggingfaceId": model.base_model,
            "Capabilities": ["TRAINING_SESSION"],
            "ContextLength": model.context_length,
            "LoopwrightBaseModel": model.base_model,
        }
    )


def keywords(model: HubModel) -> list[str]:
    return [CAPABILITY, MODEL_ID_KEYWORD + model.base_model.lower()]


def base_model_of(ref: str) -> str | None:
    """The base model a ``BaseModelArn`` names: a Hub content ARN (any partition and region,
    the name after ``Model/``), a content name, or Loopwright's own name of a base model any
    worker has served. None if none matches."""
    name = ref
    if ref.startswith("arn:"):
        parts = ref.split("/")
        if len(parts) < 4 or parts[1] != HUB_NAME or parts[2] != "Model":
            return None
        name = parts[3]
    if BaseModel.objects.filter(name=name).exists():
        return name
    for row in BaseModel.objects.order_by("name").only("name"):
        if content_name_of(row.name) == name.lower():
            return row.name
    return None
