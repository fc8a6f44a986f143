"""stable_reinforce against its formula (docs/tinker-protocol.md) on a plain peft model, its
metrics, what it ignores, what a small step does, and the refusals that name their field."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import InvalidInput

from .reference import (
    assert_grads_close,
    plain_peft_model,
    random_tokens,
    randomize_adapter,
    token_logprobs,
)
from .test_losses import stable_reinforce_term

TOL = {"rtol": 1e-5, "atol": 1e-5}
DEFAULTS = {"mask_low": 0.5, "mask_high": 5.0, "kl_coeff": 0.0}
# log-ratios p - q of the sampled tokens: inside the default band [0.5, 5] (log: -0.69..1.61),
# and well outside it on either side
INSIDE, BELOW, ABOVE = (-0.4, 0.2, 0.9, 1.3), (-1.2, -3.0), (2.0, 4.5)


def recorded(rng, model, lengths, prompts):
    """Datums whose first ``prompt`` targets are prompt tokens and whose sampled tokens carry
    recorded logprobs at chosen distances from the policy's: the log-ratio of each is known."""
    raw = []
    choices = np.array(INSIDE + BELOW + ABOVE)
    for n, prompt in zip(lengths, prompts, strict=True):
        toks, targets = random_tokens(rng, n), random_tokens(rng, n)
        with torch.no_grad():
            p = token_logprobs(model, toks, targets).numpy()
        log_ratio = rng.choice(choices, n)
        mask = np.array([0.0] * prompt + [1.0] * (n - prompt), dtype=np.float32)
        q = np.where(mask == 1, p - log_ratio, 7.5).astype(np.float32)  # prompt: never read
        adv = np.where(mask == 1, rng.normal(0, 1, n), 0.0).astype(np.float32)
        raw.append((toks, targets, q, adv, mask, log_ratio))
    return raw


def as_datum(toks, targets, q, adv, mask) -> Datum:
    return Datum(
        model_input=ModelInput.from_ints(toks),
        loss_fn_inputs={
            "target_tokens": targets,
            "logprobs": q,
            "advantages": adv,
            "sampled_mask": mask,
        },
    )


@pytest.mark.parametrize(
    "config", [None, {"kl_coeff": 0.25}, {"mask_low": 0.3, "mask_high": 8.0, "kl_coeff": 1.0}]
)
def test_values_gradients_and_metrics_follow_the_formula(host, config) -> None:
    rng = np.random.default_rng(3)
    host.create_adapter("m", AdapterConfig(rank=4, alpha=8, seed=3))
    randomize_adapter(host, "m", seed=7)
    model, ref_params = plain_peft_model(host, "m")
    raw = recorded(rng, model, [12, 7, 19, 3], [4, 0, 9, 2])
    data = [as_datum(*r[:5]) for r in raw]
    out = host.forward_backward(
        "m", ForwardBackwardInput(data=data, loss_fn="stable_reinforce", loss_fn_config=config)
    )
    cfg = {**DEFAULTS, **(config or {})}
    total = torch.zeros((), dtype=torch.float64)
    sampled = masked = 0
    kl = 0.0
    for (toks, targets, q, adv, mask, log_ratio), result in zip(
        raw, out.loss_fn_outputs, strict=True
    ):
        p = token_logprobs(model, toks, targets)
        terms = torch.stack(
            [
                stable_reinforce_term(p[t], float(q[t]), float(adv[t]), mask[t], cfg)
                for t in range(len(toks))
            ]
        )
        torch.testing.assert_close(
            torch.from_numpy(result["logprobs"].to_numpy()).double(), p.detach(), **TOL
        )
        torch.testing.assert_close(
            torch.from_numpy(result["elementwise_loss"].to_numpy()).double(), terms.detach(), **TOL
        )
        total = total + terms.sum()
        on = mask == 1
        sampled += int(on.sum())
        ratio = np.exp(log_ratio[on])
        masked += int(((ratio < cfg["mask_low"]) | (ratio > cfg["mask_high"])).sum())
        kl += float((0.5 * log_ratio[on] ** 2).sum())
    total.backward()
    assert math.isclose(out.metrics["loss:sum"], float(total.detach()), rel_tol=1e-5, abs_tol=1e-4)
    assert_grads_close(host.pool.parameters("m"), ref_params)
    assert out.metrics["sampled_tokens:sum"] == sampled
    assert out.metrics["masked_tokens:sum"] == masked > 0
    assert out.metrics["kl_sampler:sum"] == pytest.approx(kl, rel=1e-4)


def test_inside_the_band_without_penalty_it_is_importance_sampling_on_sampled_tokens(
    make_host,
) -> None:
    """The same datums, every ratio inside the band: the gradient of importance_sampling
    (``-r·A``) with the prompt's advantages at 0, on a twin adapter."""
    grads = []
    for loss_fn in ("stable_reinforce", "importance_sampling"):
        host = make_host()
        host.create_adapter("m", AdapterConfig(rank=4, seed=1))
        randomize_adapter(host, "m", seed=2)
        model, _ = plain_peft_model(host, "m")
        data = []
        for toks, targets, q, adv, mask, _ in recorded(
            np.random.default_rng(4), model, [9, 14], [3, 5]
        ):
            inside = np.where(mask == 1, q, -5.0).astype(np.float32)
            inputs = {"target_tokens": targets, "logprobs": inside, "advantages": adv}
            if loss_fn == "stable_reinforce":
                inputs["sampled_mask"] = mask
            data.append(Datum(model_input=ModelInput.from_ints(toks), loss_fn_inputs=inputs))
        # wide band: nothing masked
        config = {"mask_low": 1e-3, "mask_high": 1e3} if loss_fn == "stable_reinforce" else None
        host.forward_backward(
            "m", ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config)
        )
        grads.append({k: p.grad.clone() for k, p in host.pool.parameters("m").items()})
    for name, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][name], rtol=1e-6, atol=1e-7)


def test_an_outlying_ratio_gives_no_gradient_even_when_it_overflows(host) -> None:
    host.create_adapter("m", AdapterConfig(rank=2, seed=0))
    randomize_adapter(host, "m", seed=1)
    n = 6
    datum = as_datum(
        [3] * n,
        [4] * n,
        np.array([-200.0] * n, dtype=np.float32),  # exp(p - q) overflows float32
        np.ones(n, dtype=np.float32),
        np.ones(n, dtype=np.float32),
    )
    out = host.forward_backward("m", ForwardBackwardInput(data=[datum], loss_fn="stable_reinforce"))
    assert out.metrics["loss:sum"] == 0.0 and out.metrics["masked_tokens:sum"] == n
    assert all(p.grad is not None and not p.grad.any() for p in host.pool.parameters("m").values())


def test_a_small_step_raises_the_advantage_weighted_logprob_of_the_sampled_tokens(host) -> None:
    """On-policy data (recorded logprobs = the policy's): one small AdamW step makes
    Σ A·Δlogprob over the sampled tokens positive."""
    rng = np.random.default_rng(11)
    host.create_adapter("m", AdapterConfig(rank=4, seed=5))
    randomize_adapter(host, "m", seed=6)
    data = []
    for n, prompt in ((10, 4), (16, 6), (8, 3)):
        toks, targets = random_tokens(rng, n), random_tokens(rng, n)
        probe = Datum(
            model_input=ModelInput.from_ints(toks), loss_fn_inputs={"target_tokens": targets}
        )
        q = host.forward("m", ForwardBackwardInput(data=[probe], loss_fn="cross_entropy"))
        mask = np.array([0.0] * prompt + [1.0] * (n - prompt), dtype=np.float32)
        adv = (mask * rng.choice([-1.0, 1.0])).astype(np.float32)
        data.append(as_datum(toks, targets, q.loss_fn_outputs[0]["logprobs"].to_numpy(), adv, mask))

    def advantage_weighted() -> float:
        out = host.forward("m", ForwardBackwardInput(data=data, loss_fn="stable_reinforce"))
        return sum(
            float((o["logprobs"].to_numpy() * d.loss_fn_inputs["advantages"].to_numpy()).sum())
            for o, d in zip(out.loss_fn_outputs, data, strict=True)
        )

    before = advantage_weighted()
    host.forward_backward("m", ForwardBackwardInput(data=data, loss_fn="stable_reinforce"))
    host.optim_step("m", AdamParams(learning_rate=1e-4))
    assert advantage_weighted() - before > 0


def datum(**overrides) -> Datum:
    n = 3
    inputs = {
        "target_tokens": [1] * n,
        "logprobs": [-1.0] * n,
        "advantages": [0.0, 1.0, 1.0],
        "sampled_mask": [0.0, 1.0, 1.0],
        **overrides,
    }
    inputs = {k: v for k, v in inputs.items() if v is not None}
    return Datum(model_input=ModelInput.from_ints([1] * n), loss_fn_inputs=inputs)


@pytest.mark.parametrize(
    ("data", "config", "field", "says"),
    [
        ([datum(sampled_mask=None)], None, "data[0].loss_fn_inputs.sampled_mask", "required"),
        ([datum(logprobs=None)], None, "data[0].loss_fn_inputs.logprobs", "required"),
        (
            [datum(), datum(sampled_mask=[0.0, 0.5, 1.0])],
            None,
            "data[1].loss_fn_inputs.sampled_mask",
            "1.0 (sampled) or 0.0",
        ),
        (
            [datum(advantages=[0.3, 1.0, 1.0])],
            None,
            "data[0].loss_fn_inputs.advantages",
            "prompt token",
        ),
        ([datum(weights=[1.0] * 3)], None, "data[0].loss_fn_inputs.weights", "not an input"),
        ([datum()], {"mask_low": 0.0}, "loss_fn_config.mask_low", "in (0, 1]"),
        ([datum()], {"mask_low": 1.5}, "loss_fn_config.mask_low", "in (0, 1]"),
        ([datum()], {"mask_high": 0.9}, "loss_fn_config.mask_high", "≥ 1"),
        ([datum()], {"kl_coeff": -0.1}, "loss_fn_config.kl_coeff", "≥ 0"),
        ([datum()], {"kl_coeff": "0.1"}, "loss_fn_config.kl_coeff", "number"),
        ([datum()], {"beta": 0.1}, "loss_fn_config.beta", "not a parameter"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(host, data, config, field, says) -> None:
    host.create_adapter("m", AdapterConfig(rank=2, seed=0))
    fwd = ForwardBackwardInput.model_construct(
        data=data, loss_fn="stable_reinforce", loss_fn_config=config
    )
    with pytest.raises(InvalidInput, match=re.escape(says)) as err:
        host.forward_backward("m", fwd)
    assert err.value.field == field
    assert all(p.grad is None for p in host.pool.parameters("m").values())
