"""Memory arithmetic for placing a base model and its sessions on GPUs (see docs/scaling.md).

What one rank holds: the base weights (1/G of them when sharded over G ranks, plus the layers
FSDP all-gathers around the one running), each adapter's fp32 LoRA weights, gradients and AdamW
moments, and the larger of a training pass's saved activations and a sampling batch's KV
cache (they are not held together). Each rank's pass holds at most the tokens-per-pass budget
whatever G is, and a sharded group samples on every rank, so activations and KV cache are not
divided by G; only the weights are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer (Llama-style: gated MLP, grouped-query attention)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool = False

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        attn = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_dim * 2
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden  # + two norms

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden  # + final norm

    def lora_params(
        self, rank: int, *, attn: bool = True, mlp: bool = True, unembed: bool = True
    ) -> int:
        """A rank-r LoRA on every chosen linear layer: r × (fan-in + fan-out) each."""
        h, q = self.hidden, self.heads * self.head_dim
        per_layer = 0
        if attn:
            per_layer += (h + q) * 2 + (h + self.kv_dim) * 2  # q, o; k, v
        if mlp:
            per_layer += (h + self.intermediate) * 3
        return rank * (self.layers * per_layer + ((h + self.vocab) if unembed else 0))

    def activation_bytes_per_token(self, act_bytes: int = 2) -> int:
        """What autograd saves per token for a LoRA backward through the frozen base, without
        activation checkpointing: per layer the two norms' inputs and outputs, q (before and
        after rotary), k and v, the attention output, and the MLP's gate, up, activation and
        product (6h + 2·kv + 4·i values); then the logits, upcast to fp32, and the fp32
        log-softmax the cross-entropy keeps."""
        per_layer = 6 * self.hidden + 2 * self.kv_dim + 4 * self.intermediate
        logits = self.vocab * (act_bytes + 4 + 4 if act_bytes != 4 else 8)
        return self.layers * per_layer * act_bytes + logits

    def kv_bytes_per_token(self, kv_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_dim * kv_bytes

    @classmethod
    def of_config(cls, name: str, config: Mapping[str, Any]) -> ModelShape:
        """The shape of an HF ``config.json`` (a multimodal one's ``text_config``)."""
        c = {**config, **(config.get("text_config") or {})}
        heads = int(c["num_attention_heads"])
        return cls(
            name,
            layers=int(c["num_hidden_layers"]),
            hidden=int(c["hidden_size"]),
            intermediate=int(c["intermediate_size"]),
            heads=heads,
            kv_heads=int(c.get("num_key_value_heads") or heads),
            head_dim=int(c.get("head_dim") or int(c["hidden_size"]) // heads),
            vocab=int(c["vocab_size"]),
            tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        )


LLAMA_3_1_8B = ModelShape("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128, 128256)
MISTRAL_SMALL_22B = ModelShape("Mistral-Small-22B", 56, 6144, 16384, 48, 8, 128, 32768)
LLAMA_3_1_70B = ModelShape("Llama-3.1-70B", 80, 8192, 28672, 64, 8, 128, 128256)

LORA_STATE_BYTES = 16  # fp32 weight, gradient, AdamW exp_avg and exp_avg_sq


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank holds, by part."""

    weights: int
    gather_buffers: int
    adapters: int
    working: int  # max(activations of one pass, KV cache of one sampling batch)
    reserve: int

    @property
    def total(self) -> int:
        return self.weights + self.gather_buffers + self.adapters + self.working + self.reserve


def rank_memory(
    shape: ModelShape,
    ranks: int,
    *,
    lora_rank: int = 32,
    adapters: int = 1,
    pass_tokens: int = 8192,
    kv_tokens: int = 65536,
    weight_bytes: int = 2,
    reserve: int = 3 * GIB,
) -> RankMemory:
    """One rank's memory with the base sharded over ``ranks`` (1: not sharded). ``reserve``
    is the CUDA context, allocator slack and transient gradient buffers."""
    weights = math.ceil(shape.params() / ranks) * weight_bytes
    # FSDP holds the running layer and the prefetched next one whole.
    gather = 0 if ranks == 1 else 2 * shape.layer_params() * weight_bytes
    lora = adapters * shape.lora_params(lora_rank) * LORA_STATE_BYTES
    working = max(
        pass_tokens * shape.activation_bytes_per_token(weight_bytes),
        kv_tokens * shape.kv_bytes_per_token(weight_bytes),
    )
    return RankMemory(weights, gather, lora, working, reserve)


def max_pass_tokens(
    shape: ModelShape, ranks: int, gpu_bytes: int, *, kv_tokens: int = 0, **kwargs: int
) -> int:
    """The largest tokens-per-pass budget (``HostConfig.max_batch_tokens``) that fits a rank
    of ``gpu_bytes``; 0 when the weights and adapters alone do not fit."""
    fixed = rank_memory(shape, ranks, pass_tokens=0, kv_tokens=kv_tokens, **kwargs)
    free = gpu_bytes - fixed.total
    if free < 0:
        return 0
    return free // shape.activation_bytes_per_token(kwargs.get("weight_bytes", 2))


def gpus_needed(
    shape: ModelShape, gpu_bytes: int, *, pass_tokens: int, max_ranks: int = 64, **kwargs: int
) -> int | None:
    """The fewest ranks (a power of two) whose every rank fits; None if none up to ``max_ranks``
    (activations and KV cache do not shrink with sharding)."""
    ranks = 1
    while ranks <= max_ranks:
        if rank_memory(shape, ranks, pass_tokens=pass_tokens, **kwargs).total <= gpu_bytes:
            return ranks
        ranks *= 2
    return None


@dataclass(frozen=True)
class Fit:
    """How a base model fits a worker: one rank's need holding it whole at the asked pass budget,
    the ranks it must be sharded over (1: it fits whole; None: no number of ranks of this memory
    holds it even with small passes), and the pass budget that fits those ranks."""

    whole_bytes: int
    memory_bytes: int
    ranks: int | None
    weights_bytes: int  # the base's weights alone, whole
    pass_tokens: int  # the asked budget, or less where only less fits (0: ranks is None)


MIN_PASS_TOKENS = 1024  # passes smaller than this waste the accelerator: shard rather


def base_fit(
    shape: ModelShape,
    memory_bytes: int,
    *,
    pass_tokens: int,
    kv_tokens: int,
    weight_bytes: int,
    reserve: int,
    lora_rank: int = 32,
    max_ranks: int = 64,
    min_pass_tokens: int = MIN_PASS_TOKENS,
) -> Fit:
    """Whether a worker of ``memory_bytes`` holds the base with one rank-``lora_rank`` adapter
    and its working memory, and if not, over how many such workers it must be sharded. Passes
    are made smaller first (down to ``min_pass_tokens``), then the base is sharded."""
    kwargs = dict(
        lora_rank=lora_rank, kv_tokens=kv_tokens, weight_bytes=weight_bytes, reserve=reserve
    )
    whole = rank_memory(shape, 1, pass_tokens=pass_tokens, **kwargs).total
    weights = shape.params() * weight_bytes
    floor = min(pass_tokens, min_pass_tokens)
    ranks = gpus_needed(shape, memory_bytes, pass_tokens=floor, max_ranks=max_ranks, **kwargs)
    if ranks is None:
        return Fit(whole, memory_bytes, None, weights, 0)
    # the largest pass whose activations fit beside the rest (a pass and a sampling batch's KV
    # cache are not held together: the KV cache fits already, at ``floor``)
    held = rank_memory(shape, ranks, pass_tokens=0, **{**kwargs, "kv_tokens": 0}).total
    room = (memory_bytes - held) // shape.activation_bytes_per_token(weight_bytes)
    return Fit(whole, memory_bytes, ranks, weights, max(floor, min(pass_tokens, room)))
