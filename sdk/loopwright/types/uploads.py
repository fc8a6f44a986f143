"""Weights made elsewhere, uploaded into the account (tinker 0.39's
``external_weights_upload_start`` and ``external_weights_upload_finish``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from ._base import RequestModel, ResponseModel
from .limits import BaseModelName, Id
from .lora import LoraConfig

__all__ = [
    "ExternalWeightsUploadFinishRequest",
    "ExternalWeightsUploadFinishResponse",
    "ExternalWeightsUploadStartRequest",
    "ExternalWeightsUploadStartResponse",
]


class ExternalWeightsUploadStartRequest(RequestModel):
    """Start uploading a LoRA adapter trained elsewhere."""

    base_model: BaseModelName
    """The base model the adapter belongs to."""

    lora_config: LoraConfig
    """Its shape: rank and the layers it adapts."""

    destination_project_id: Annotated[str, Field(max_length=128)] | None = None
    """The project that owns it: ``default`` (an account is one project), or left out."""


class ExternalWeightsUploadStartResponse(ResponseModel):
    """Where to PUT each file of the adapter, until when."""

    upload_id: str
    """Names the upload when finishing it."""

    urls: dict[str, str]
    """A signed URL per file (``adapter_model.safetensors``, ``adapter_config.json``): PUT the
    file's bytes to it, no API key needed."""

    expires: datetime
    """When the URLs stop working."""


class ExternalWeightsUploadFinishRequest(RequestModel):
    """Make the uploaded files a checkpoint."""

    upload_id: Id
    """The upload, as its start answered."""


class ExternalWeightsUploadFinishResponse(ResponseModel):
    """The checkpoint the upload made."""

    tinker_path: str
    """Its path: sample from it (``create_sampling_client(model_path=…)``) or load it."""
