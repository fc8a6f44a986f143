"""A forward (tinker's forward_only) between forward_backward and optim_step changes nothing."""

from __future__ import annotations

import numpy as np
import torch

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig

from .reference import random_tokens, randomize_adapter


def batch(rng: np.random.Generator, loss_fn: str) -> ForwardBackwardInput:
    data = []
    for n in (7, 12, 3):
        inputs: dict = {"target_tokens": random_tokens(rng, n)}
        if loss_fn == "ppo":
            inputs["logprobs"] = rng.uniform(-6, -4, n).astype(np.float32)
            inputs["advantages"] = rng.normal(0, 1, n).astype(np.float32)
        data.append(
            Datum(model_input=ModelInput.from_ints(random_tokens(rng, n)), loss_fn_inputs=inputs)
        )
    return ForwardBackwardInput(data=data, loss_fn=loss_fn)


def train_step(host, with_forward: bool) -> None:
    host.create_adapter("m", AdapterConfig(rank=4, seed=2))
    randomize_adapter(host, "m", seed=9)
    if with_forward:  # before any gradient exists, too
        host.forward("m", batch(np.random.default_rng(5), "cross_entropy"))
        assert all(p.grad is None for p in host.pool.parameters("m").values())
    host.forward_backward("m", batch(np.random.default_rng(1), "cross_entropy"))
    if with_forward:
        grads = {k: p.grad.clone() for k, p in host.pool.parameters("m").items()}
        host.forward("m", batch(np.random.default_rng(2), "ppo"))
        host.forward("m", batch(np.random.default_rng(3), "cross_entropy"))
        for k, p in host.pool.parameters("m").items():
            assert torch.equal(p.grad, grads[k]), k
    host.optim_step("m", AdamParams(learning_rate=1e-2, weight_decay=0.1))


def test_forward_between_forward_backward_and_optim_step_is_bit_exactly_neutral(
    make_host,
) -> None:
    plain, probed = make_host(), make_host()
    train_step(plain, with_forward=False)
    train_step(probed, with_forward=True)
    ours, theirs = probed.pool.parameters("m"), plain.pool.parameters("m")
    for k in theirs:
        assert torch.equal(ours[k].detach(), theirs[k].detach()), k
    a, b = probed.pool.optimizer("m"), plain.pool.optimizer("m")
    assert a.step == b.step == 1
    for k, v in b.tensors().items():
        assert torch.equal(a.tensors()[k], v), k
