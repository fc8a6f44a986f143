"""The placement arithmetic against the tiny model as it runs, and against published sizes."""

from __future__ import annotations

import torch

from workers.engine.adapters import AdapterConfig
from workers.engine.distributed.placement import (
    GIB,
    LLAMA_3_1_8B,
    LLAMA_3_1_70B,
    ModelShape,
    gpus_needed,
    max_pass_tokens,
    rank_memory,
)
from workers.engine.mixed_lora import RowPlan


def tiny_shape(host) -> ModelShape:
    c = host.pool.model.get_base_model().config
    head_dim = c.hidden_size // c.num_attention_heads
    return ModelShape(
        "tiny", c.num_hidden_layers, c.hidden_size, c.intermediate_size,
        c.num_attention_heads, c.num_key_value_heads, head_dim, c.vocab_size,
    )  # fmt: skip


def test_parameter_counts_are_the_models(host) -> None:
    shape = tiny_shape(host)
    base = host.pool.model.get_base_model()
    assert shape.params() == sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
    host.create_adapter("m", AdapterConfig(rank=4))
    assert shape.lora_params(4) == sum(p.numel() for p in host.pool.parameters("m").values())
    # the published totals of two real configs
    assert LLAMA_3_1_8B.params() == 8_030_261_248
    assert LLAMA_3_1_70B.params() == 70_553_706_496


def test_kv_cache_per_token_is_what_the_model_keeps(host) -> None:
    shape = tiny_shape(host)
    n = 37
    with torch.no_grad():
        out = host.pool.model(input_ids=torch.randint(0, 256, (1, n)), use_cache=True)
    held = sum(
        t.numel() * t.element_size()
        for layer in out.past_key_values.layers
        for t in (layer.keys, layer.values)
    )
    assert held == n * shape.kv_bytes_per_token(kv_bytes=4)


def test_activation_estimate_is_within_two_percent_of_what_autograd_saves(host) -> None:
    """Bytes of every distinct tensor saved for backward in one LoRA pass, parameters aside."""
    shape = tiny_shape(host)
    host.create_adapter("m", AdapterConfig(rank=4))
    (name,) = host.pool.load(["m"])
    weights = {p.untyped_storage().data_ptr() for p in host.pool.model.parameters()}
    saved: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    rows, length = 4, 96
    ids = torch.randint(0, 256, (rows, length))
    plan = RowPlan.of([name] * rows, host.device)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), host.pool.router.rows(plan):
        host._target_logprobs(ids, ids)
    measured = sum(saved.values()) / (rows * length)
    estimate = shape.activation_bytes_per_token(act_bytes=4)
    assert abs(measured - estimate) <= 0.02 * estimate, (measured, estimate)


def test_placements() -> None:
    gpu80, gpu141 = 80 * GIB, 141 * GIB
    # 8B fits one GPU of either size; 16k tokens per pass only on the larger one
    assert gpus_needed(LLAMA_3_1_8B, gpu80, pass_tokens=8192, kv_tokens=0) == 1
    assert gpus_needed(LLAMA_3_1_8B, gpu80, pass_tokens=16384, kv_tokens=0) is None
    assert gpus_needed(LLAMA_3_1_8B, gpu141, pass_tokens=16384, kv_tokens=0) == 1
    # 70B's bf16 weights alone exceed an 80 GB GPU: sharding is required
    assert rank_memory(LLAMA_3_1_70B, 1).weights > gpu80
    assert max_pass_tokens(LLAMA_3_1_70B, 1, gpu141) < 100
    assert max_pass_tokens(LLAMA_3_1_70B, 2, gpu141) > 2000
    # sharding divides the weights, not the activations
    one, four = rank_memory(LLAMA_3_1_70B, 1), rank_memory(LLAMA_3_1_70B, 4)
    assert four.working == one.working and four.weights * 4 >= one.weights > four.weights * 3.99
