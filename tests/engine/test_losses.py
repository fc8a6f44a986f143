"""Every loss against a hand-written per-token reference on a plain peft model: values and grads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from loopwright.types import Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig

from .reference import (
    assert_grads_close,
    plain_peft_model,
    random_tokens,
    randomize_adapter,
    token_logprobs,
)

TOL = {"rtol": 1e-5, "atol": 1e-5}


def reference_term(loss_fn: str, p: torch.Tensor, t: int, inp: dict, cfg: dict) -> torch.Tensor:
    """The loss of one token, written out as WIRE.md states it."""
    if loss_fn == "cross_entropy":
        return -p * inp["weights"][t]
    q, adv = inp["logprobs"][t], inp["advantages"][t]
    r = torch.exp(p - q)
    lo = inp.get("clip_low_threshold", [cfg.get("clip_low_threshold")] * (t + 1))[t]
    hi = inp.get("clip_high_threshold", [cfg.get("clip_high_threshold")] * (t + 1))[t]
    if loss_fn == "importance_sampling":
        return -r * adv
    if loss_fn == "ppo":
        return -torch.minimum(r * adv, torch.clamp(r, lo, hi) * adv)
    if loss_fn == "cispo":
        return -torch.clamp(r, lo, hi).detach() * p * adv
    if loss_fn == "dro":
        return -(p * adv - 0.5 * cfg["beta"] * (p - q) ** 2)
    if loss_fn == "stable_reinforce":
        return stable_reinforce_term(p, q, adv, inp["sampled_mask"][t], cfg)
    raise AssertionError(loss_fn)


def stable_reinforce_term(p: torch.Tensor, q, adv, sampled, cfg: dict) -> torch.Tensor:
    """docs/tinker-protocol.md's stable_reinforce for one token: a prompt token gives nothing;
    a sampled one ``-r·A`` while ``r = exp(p - q)`` lies in [mask_low, mask_high], plus
    ``kl_coeff·½(p - q)²``."""
    if sampled == 0:
        return p * 0.0
    r = torch.exp(p - q)
    inside = cfg["mask_low"] <= float(r.detach()) <= cfg["mask_high"]
    policy = -r * adv if inside else p * 0.0
    return policy + cfg["kl_coeff"] * 0.5 * (p - q) ** 2


def make_inputs(loss_fn: str, rng: np.random.Generator, n: int, per_token_clip: bool) -> dict:
    inp: dict = {"target_tokens": random_tokens(rng, n)}
    if loss_fn == "cross_entropy":
        inp["weights"] = rng.uniform(-1.0, 2.0, n).astype(np.float32).tolist()
        return inp
    # Behaviour logprobs near the policy's so ratios land on both sides of the clip range.
    inp["logprobs"] = rng.uniform(-7.0, -4.0, n).astype(np.float32).tolist()
    inp["advantages"] = rng.normal(0, 1, n).astype(np.float32).tolist()
    if per_token_clip:
        inp["clip_low_threshold"] = [0.9] * n
        inp["clip_high_threshold"] = [1.05] * n
    if loss_fn == "stable_reinforce":
        # a prompt first: no advantage there, and a recorded logprob no sampler could give
        # (it must not be read)
        prompt = int(rng.integers(0, n))
        mask = [0.0] * prompt + [1.0] * (n - prompt)
        inp["sampled_mask"] = mask
        inp["advantages"] = [a if m else 0.0 for a, m in zip(inp["advantages"], mask, strict=True)]
        inp["logprobs"] = [q if m else 30.0 for q, m in zip(inp["logprobs"], mask, strict=True)]
    return inp


CASES = [
    ("cross_entropy", None, False),
    ("importance_sampling", None, False),
    ("ppo", None, False),
    ("ppo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}, False),
    ("ppo", None, True),
    ("cispo", None, False),
    ("cispo", {"clip_low_threshold": 0.7, "clip_high_threshold": 1.3}, False),
    ("dro", {"beta": 0.3}, False),
    ("stable_reinforce", None, False),
    ("stable_reinforce", {"kl_coeff": 0.3, "mask_low": 0.7, "mask_high": 1.6}, False),
]
DEFAULTS = {
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "stable_reinforce": {"mask_low": 0.5, "mask_high": 5.0, "kl_coeff": 0.0},
}


@pytest.mark.parametrize(("loss_fn", "config", "per_token_clip"), CASES)
def test_loss_values_and_gradients_match_reference(host, loss_fn, config, per_token_clip) -> None:
    rng = np.random.default_rng(7)
    host.create_adapter("m", AdapterConfig(rank=4, alpha=8, seed=3))
    randomize_adapter(host, "m", seed=11)
    lengths = [13, 5, 21, 1]
    raw = []
    for n in lengths:
        raw.append((random_tokens(rng, n), make_inputs(loss_fn, rng, n, per_token_clip)))
    data = [Datum(model_input=ModelInput.from_ints(toks), loss_fn_inputs=inp) for toks, inp in raw]
    out = host.forward_backward(
        "m", ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config)
    )

    ref_model, ref_params = plain_peft_model(host, "m")
    cfg = {**DEFAULTS.get(loss_fn, {}), **(config or {})}
    total = torch.zeros((), dtype=torch.float64)
    for (toks, inp), result in zip(raw, out.loss_fn_outputs, strict=True):
        p = token_logprobs(ref_model, toks, inp["target_tokens"])
        terms = torch.stack([reference_term(loss_fn, p[t], t, inp, cfg) for t in range(len(toks))])
        torch.testing.assert_close(
            torch.from_numpy(result["logprobs"].to_numpy()).double(), p.detach(), **TOL
        )
        torch.testing.assert_close(
            torch.from_numpy(result["elementwise_loss"].to_numpy()).double(), terms.detach(), **TOL
        )
        total = total + terms.sum()
    total.backward()
    assert math.isclose(out.metrics["loss:sum"], float(total.detach()), rel_tol=1e-5, abs_tol=1e-4)
    assert_grads_close(host.pool.parameters("m"), ref_params)


def test_gradients_accumulate_until_optim_step(host) -> None:
    rng = np.random.default_rng(0)
    host.create_adapter("m", AdapterConfig(rank=2, seed=0))
    randomize_adapter(host, "m", seed=1)
    d1 = Datum(
        model_input=ModelInput.from_ints(random_tokens(rng, 9)),
        loss_fn_inputs={"target_tokens": random_tokens(rng, 9)},
    )
    d2 = Datum(
        model_input=ModelInput.from_ints(random_tokens(rng, 6)),
        loss_fn_inputs={"target_tokens": random_tokens(rng, 6)},
    )
    host.forward_backward("m", ForwardBackwardInput(data=[d1], loss_fn="cross_entropy"))
    host.forward_backward("m", ForwardBackwardInput(data=[d2], loss_fn="cross_entropy"))
    split = {k: p.grad.clone() for k, p in host.pool.parameters("m").items()}
    for p in host.pool.parameters("m").values():
        p.grad = None
    host.forward_backward("m", ForwardBackwardInput(data=[d1, d2], loss_fn="cross_entropy"))
    for k, p in host.pool.parameters("m").items():
        # one padded batch and two calls sum in different orders (float32, and kernels that
        # block the matrices by their shapes): equal to a few parts in 10⁵ of the largest entry
        scale = max(1.0, float(split[k].abs().max()))
        assert float((p.grad - split[k]).abs().max()) <= 5e-5 * scale, k


def test_client_side_custom_loss_through_cross_entropy_weights(host) -> None:
    """A loss C(logprobs) computed by the client, sent as weights = -dC/dlogp, gives C's gradient."""
    rng = np.random.default_rng(5)
    host.create_adapter("m", AdapterConfig(rank=4, seed=2))
    randomize_adapter(host, "m", seed=4)
    toks = [random_tokens(rng, n) for n in (11, 7)]
    targets = [random_tokens(rng, len(t)) for t in toks]
    coef = [rng.normal(0, 1, len(t)) for t in toks]  # mixed signs: negative weights too

    def custom(lp: torch.Tensor, c: np.ndarray) -> torch.Tensor:
        return (torch.as_tensor(c) * lp**2).sum() + lp.exp().sum()

    fwd_data = [
        Datum(model_input=ModelInput.from_ints(t), loss_fn_inputs={"target_tokens": y})
        for t, y in zip(toks, targets, strict=True)
    ]
    fwd = host.forward("m", ForwardBackwardInput(data=fwd_data, loss_fn="cross_entropy"))
    data = []
    for d, o, c in zip(fwd_data, fwd.loss_fn_outputs, coef, strict=True):
        lp = torch.from_numpy(o["logprobs"].to_numpy()).double().requires_grad_(True)
        (grad,) = torch.autograd.grad(custom(lp, c), lp)
        data.append(
            Datum(
                model_input=d.model_input,
                loss_fn_inputs={**d.loss_fn_inputs, "weights": (-grad).float().numpy()},
            )
        )
    assert any((d.loss_fn_inputs["weights"].to_numpy() < 0).any() for d in data)
    host.forward_backward("m", ForwardBackwardInput(data=data, loss_fn="cross_entropy"))

    ref_model, ref_params = plain_peft_model(host, "m")
    total = sum(
        custom(token_logprobs(ref_model, t, y), c)
        for t, y, c in zip(toks, targets, coef, strict=True)
    )
    total.backward()
    assert_grads_close(host.pool.parameters("m"), ref_params)
