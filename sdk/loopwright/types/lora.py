"""LoraConfig: which layers of a base model get a LoRA adapter, and its rank."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from ._base import RequestModel
from .limits import Seed

__all__ = ["LoraConfig"]


class LoraConfig(RequestModel):
    """Shape of the LoRA adapter of a training model."""

    rank: Annotated[int, Field(ge=1, le=1024)]
    """Rank of the low-rank matrices: 1 to 1,024 (a worker may take less: 128 by default)."""

    alpha: Annotated[float, Field(gt=0, le=65536)] | None = None
    """LoRA scaling numerator (the update is scaled by alpha / rank); None means the server's
    default of 32 (Loopwright extension)."""

    seed: Seed | None = None
    """Seed of the adapter's initialisation, for reproducible runs."""

    train_unembed: bool = True
    """Whether the unembedding (output) layer gets an adapter."""

    train_mlp: bool = True
    """Whether the MLP (and MoE) layers get adapters."""

    train_attn: bool = True
    """Whether the attention layers get adapters."""

    train_projector: bool = False
    """Whether a vision-language base model's projector (between its vision tower and its
    language model) gets adapters too; a text base model refuses True (Loopwright extension).
    Sent only when True, so a body without it reads as it always did."""

    @model_serializer(mode="wrap")
    def _projector_only_when_on(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        out = handler(self)
        if isinstance(out, dict) and out.get("train_projector") is False:
            del out["train_projector"]
        return out
