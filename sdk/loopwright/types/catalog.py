"""The base-model catalog: which models a server trains and samples, and their tokenizer files."""

from __future__ import annotations

from ._base import ResponseModel

__all__ = ["BaseModelInfo", "ListBaseModelsResponse", "TokenizerFilesResponse"]


class BaseModelInfo(ResponseModel):
    """A base model the server can fine-tune and sample."""

    name: str
    """Name to pass as base_model."""

    context_length: int
    """Longest sequence, in tokens, the model accepts."""

    description: str = ""
    """A short description for people."""

    chat_template: str | None = None
    """The tokenizer's Jinja chat template, if it has one."""


class ListBaseModelsResponse(ResponseModel):
    """The server's base-model catalog."""

    base_models: list[BaseModelInfo]
    """The available base models."""


class TokenizerFilesResponse(ResponseModel):
    """The files of a base model's tokenizer, enough for AutoTokenizer.from_pretrained."""

    base_model: str
    """The base model they belong to."""

    files: dict[str, str]
    """File name (no directories) to its text content, e.g. tokenizer.json."""
