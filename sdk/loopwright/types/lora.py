"""LoraConfig: which layers of a base model get a LoRA adapter, and its rank."""

from __future__ import annotations

from ._base import RequestModel

__all__ = ["LoraConfig"]


class LoraConfig(RequestModel):
    """Shape of the LoRA adapter of a training model."""

    rank: int
    """Rank of the low-rank matrices."""

    alpha: float | None = None
    """LoRA scaling numerator (the update is scaled by alpha / rank); None means the server's
    default of 32 (Loopwright extension)."""

    seed: int | None = None
    """Seed of the adapter's initialisation, for reproducible runs."""

    train_unembed: bool = True
    """Whether the unembedding (output) layer gets an adapter."""

    train_mlp: bool = True
    """Whether the MLP (and MoE) layers get adapters."""

    train_attn: bool = True
    """Whether the attention layers get adapters."""
