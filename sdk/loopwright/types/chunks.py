"""The pieces a ModelInput is made of: token chunks, and the image chunks the protocol defines.

A chunk without a ``type`` is a token chunk, as older clients send it.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    field_serializer,
    field_validator,
)

from ._base import RequestModel
from .limits import NonNegativeInt32, TokenId

__all__ = [
    "EncodedTextChunk",
    "ImageAssetPointerChunk",
    "ImageChunk",
    "ImageDimensions",
    "ModelInputChunk",
]


class EncodedTextChunk(RequestModel):
    """A run of token ids."""

    tokens: list[TokenId]
    """Token ids, in order (each 0 to 2^31 − 1, inside the base model's vocabulary)."""

    type: Literal["encoded_text"] = "encoded_text"
    """Chunk kind tag."""

    @property
    def length(self) -> int:
        """Number of tokens."""
        return len(self.tokens)


class ImageDimensions(RequestModel):
    """A width and height in pixels."""

    width: Annotated[int, Field(ge=1, le=2**31 - 1)]
    """Width in pixels."""

    height: Annotated[int, Field(ge=1, le=2**31 - 1)]
    """Height in pixels."""


class ImageChunk(RequestModel):
    """An inline image (base64 in JSON)."""

    data: Annotated[bytes, WithJsonSchema({"type": "string", "contentEncoding": "base64"})]
    """Encoded image bytes; base64 text on the wire."""

    format: Literal["png", "jpeg"]
    """Image file format."""

    expected_tokens: NonNegativeInt32 | None = None
    """Advisory number of tokens the image occupies; needed to compute a length."""

    override_dimensions: ImageDimensions | None = None
    """Dimensions the image is resized to before the model's processor sees it (its token
    count follows them); None: its encoded dimensions."""

    type: Literal["image"] = "image"
    """Chunk kind tag."""

    @field_validator("data", mode="before")
    @classmethod
    def _decode_base64(cls, value: Any) -> Any:
        return base64.b64decode(value) if isinstance(value, str) else value

    @field_serializer("data")
    def _encode_base64(self, value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    @property
    def length(self) -> int:
        """Number of tokens, as declared by expected_tokens."""
        return _declared_length(self.expected_tokens, "ImageChunk")


class ImageAssetPointerChunk(RequestModel):
    """An image referenced by path or URL."""

    format: Literal["png", "jpeg"]
    """Image file format."""

    location: Annotated[str, Field(max_length=2048)]
    """Path or URL of the image."""

    expected_tokens: NonNegativeInt32 | None = None
    """Advisory number of tokens the image occupies; needed to compute a length."""

    type: Literal["image_asset_pointer"] = "image_asset_pointer"
    """Chunk kind tag."""

    @property
    def length(self) -> int:
        """Number of tokens, as declared by expected_tokens."""
        return _declared_length(self.expected_tokens, "ImageAssetPointerChunk")


def _declared_length(expected_tokens: int | None, kind: str) -> int:
    if expected_tokens is None:
        raise ValueError(f"{kind} needs expected_tokens to have a length")
    return expected_tokens


def _chunk_tag(value: Any) -> str | None:
    """The union tag of a chunk: its ``type``, with a missing one meaning encoded_text."""
    if isinstance(value, dict):
        tag = value.get("type", "encoded_text")
        return tag if isinstance(tag, str) else None
    return getattr(value, "type", None)


ModelInputChunk = Annotated[
    Annotated[EncodedTextChunk, Tag("encoded_text")]
    | Annotated[ImageChunk, Tag("image")]
    | Annotated[ImageAssetPointerChunk, Tag("image_asset_pointer")],
    Discriminator(_chunk_tag),
]
"""One chunk of a ModelInput, chosen by its ``type`` field."""
