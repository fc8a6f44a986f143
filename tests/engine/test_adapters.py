"""Adapters on one base model: isolation, eviction to disk, bit-exact save/load, capacity limits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import CheckpointError, InvalidInput, UnknownAdapter

from .reference import random_tokens


def batch(seed: int, n: int = 3, length: int = 12) -> ForwardBackwardInput:
    rng = np.random.default_rng(seed)
    data = [
        Datum(
            model_input=ModelInput.from_ints(random_tokens(rng, length)),
            loss_fn_inputs={"target_tokens": random_tokens(rng, length)},
        )
        for _ in range(n)
    ]
    return ForwardBackwardInput(data=data, loss_fn="cross_entropy")


ADAM = AdamParams(learning_rate=1e-2, weight_decay=0.01, grad_clip_norm=1.0)


def train(host, model_id: str, steps: range) -> None:
    for step in steps:
        host.forward_backward(model_id, batch(step))
        host.optim_step(model_id, ADAM)


def snapshot(host, model_id: str) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in host.pool.parameters(model_id).items()}


def optimizer_snapshot(host, model_id: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in host.pool.optimizer(model_id).tensors().items()}


def assert_bit_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_training_one_adapter_never_changes_another(host) -> None:
    host.create_adapter("a", AdapterConfig(rank=4, seed=1))
    host.create_adapter("b", AdapterConfig(rank=8, alpha=16, seed=2, train_mlp=False))
    train(host, "b", range(1))
    before_b = snapshot(host, "b")
    before_b_opt = optimizer_snapshot(host, "b")
    host.forward_backward("b", batch(99))  # pending gradients of b must survive a's training
    grads_b = {k: p.grad.clone() for k, p in host.pool.parameters("b").items()}
    train(host, "a", range(3))
    assert_bit_equal(snapshot(host, "b"), before_b)
    assert_bit_equal(optimizer_snapshot(host, "b"), before_b_opt)
    assert_bit_equal({k: p.grad for k, p in host.pool.parameters("b").items()}, grads_b)
    assert not any("mlp" in k for k in host.pool.parameters("b"))
    assert any("mlp" in k for k in host.pool.parameters("a"))


def test_base_model_is_frozen_and_shared(host) -> None:
    def base_params() -> dict[str, torch.Tensor]:
        named = host.pool.model.named_parameters()
        return {n.replace(".base_layer.", "."): p for n, p in named if "lora_" not in n}

    before = {n: p.detach().clone() for n, p in base_params().items()}
    host.create_adapter("a", AdapterConfig(rank=4, seed=1))
    train(host, "a", range(2))
    after = base_params()
    assert_bit_equal(before, {n: p.detach() for n, p in after.items()})
    assert not any(p.requires_grad for p in after.values())


def test_same_seed_same_initial_adapter(make_host) -> None:
    h1, h2 = make_host(), make_host()
    h1.create_adapter("x", AdapterConfig(rank=4, seed=42))
    h2.create_adapter("y", AdapterConfig(rank=4, seed=42))
    a, b = snapshot(h1, "x"), snapshot(h2, "y")
    assert_bit_equal(a, b)


def test_eviction_to_disk_is_transparent_and_exact(make_host) -> None:
    small = make_host(max_loaded_adapters=2)
    big = make_host(max_loaded_adapters=8)
    ids = ["s1", "s2", "s3", "s4"]
    for h in (small, big):
        for i, m in enumerate(ids):
            h.create_adapter(m, AdapterConfig(rank=4, seed=i))
    # Interleave: pending gradients and optimizer state must survive eviction.
    for rnd in range(2):
        for i, m in enumerate(ids):
            for h in (small, big):
                h.forward_backward(m, batch(10 * rnd + i))
        for m in ids:
            for h in (small, big):
                h.optim_step(m, ADAM)
    assert len(small.pool.loaded_ids()) == 2
    assert list(small.pool.spill_dir.iterdir())  # the others live on disk
    for m in ids:
        assert_bit_equal(snapshot(small, m), snapshot(big, m))
        assert_bit_equal(optimizer_snapshot(small, m), optimizer_snapshot(big, m))


def test_save_then_load_into_a_fresh_host_continues_bit_exactly(make_host, tmp_path) -> None:
    straight = make_host()
    straight.create_adapter("m", AdapterConfig(rank=4, seed=5))
    train(straight, "m", range(5))

    first = make_host()
    first.create_adapter("m", AdapterConfig(rank=4, seed=5))
    train(first, "m", range(3))
    first.save_state("m", tmp_path / "ckpt")

    second = make_host()
    second.create_adapter("other", AdapterConfig(rank=4, seed=777))
    second.load_state("other", tmp_path / "ckpt", optimizer=True)
    train(second, "other", range(3, 5))
    assert_bit_equal(snapshot(second, "other"), snapshot(straight, "m"))
    assert_bit_equal(optimizer_snapshot(second, "other"), optimizer_snapshot(straight, "m"))
    assert second.pool.optimizer("other").step == 5


def test_sampler_weights_cannot_resume_with_optimizer(host, tmp_path) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=5))
    train(host, "m", range(1))
    host.save_state("m", tmp_path / "sampler", optimizer=False)
    host.create_adapter("n", AdapterConfig(rank=4, seed=6))
    before = snapshot(host, "n")
    with pytest.raises(CheckpointError, match="without optimizer state"):
        host.load_state("n", tmp_path / "sampler", optimizer=True)
    assert_bit_equal(snapshot(host, "n"), before)  # nothing half-loaded
    host.load_state("n", tmp_path / "sampler", optimizer=False)
    assert_bit_equal(snapshot(host, "n"), snapshot(host, "m"))


def test_loading_a_mismatched_or_corrupt_checkpoint_changes_nothing(host, tmp_path) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=5))
    host.save_state("m", tmp_path / "r4")
    host.create_adapter("r8", AdapterConfig(rank=8, seed=5))
    before = snapshot(host, "r8")
    with pytest.raises(CheckpointError, match="does not match"):
        host.load_state("r8", tmp_path / "r4", optimizer=True)
    (tmp_path / "r4" / "adapter_model.safetensors").write_bytes(b"garbage")
    host.create_adapter("m2", AdapterConfig(rank=4, seed=9))
    before_m2 = snapshot(host, "m2")
    with pytest.raises(CheckpointError, match="unreadable"):
        host.load_state("m2", tmp_path / "r4", optimizer=True)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        host.load_state("m2", tmp_path / "missing", optimizer=False)
    assert_bit_equal(snapshot(host, "r8"), before)
    assert_bit_equal(snapshot(host, "m2"), before_m2)


def test_capacity_and_lifecycle_errors(make_host) -> None:
    host = make_host(max_lora_rank=16)
    with pytest.raises(InvalidInput) as err:
        host.create_adapter("big", AdapterConfig(rank=32))
    assert err.value.field == "lora_config.rank"
    with pytest.raises(InvalidInput) as err:
        host.create_adapter(
            "none", AdapterConfig(rank=4, train_attn=False, train_mlp=False, train_unembed=False)
        )
    assert err.value.field == "lora_config"
    host.create_adapter("m", AdapterConfig(rank=4))
    with pytest.raises(InvalidInput, match="already exists"):
        host.create_adapter("m", AdapterConfig(rank=4))
    host.remove_adapter("m")
    with pytest.raises(UnknownAdapter):
        host.forward_backward("m", batch(0))
    assert not host.has_adapter("m")


def test_loading_adopts_the_checkpoint_alpha_and_resets_the_optimizer(make_host, tmp_path) -> None:
    first = make_host()
    first.create_adapter("m", AdapterConfig(rank=4, alpha=64, seed=5))
    train(first, "m", range(2))
    first.save_state("m", tmp_path / "ckpt")
    second = make_host()
    second.create_adapter(
        "n", AdapterConfig(rank=4, alpha=32, seed=1)
    )  # e.g. a client that omits alpha
    second.load_state("n", tmp_path / "ckpt", optimizer=False)
    assert second.pool.config("n").alpha == 64
    assert second.pool.optimizer("n").step == 0
    probe = batch(123)
    a = first.forward("m", probe).loss_fn_outputs[0]["logprobs"].to_numpy()
    b = second.forward("n", probe).loss_fn_outputs[0]["logprobs"].to_numpy()
    assert (a == b).all()
