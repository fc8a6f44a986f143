"""GSPO against two independent references on a plain peft model: Tinker's published GSPO-token
definition written out per datum, and the paper's sequence-level objective (uniform advantages)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from loopwright.types import Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import InvalidInput

from .reference import (
    assert_grads_close,
    plain_peft_model,
    random_tokens,
    randomize_adapter,
    token_logprobs,
)

CLIP = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
TOL = {"rtol": 1e-5, "atol": 1e-5}


def gspo_token_terms(p: torch.Tensor, q, adv, mask, lo: float, hi: float) -> torch.Tensor:
    """Tinker's GSPO-token, one datum: each token carries sg(s)·p/sg(p), s the geometric mean
    of p/q over the marked tokens."""
    q_t, a_t = torch.tensor(q, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64)
    marked = torch.tensor(mask) != 0
    s = torch.exp((p.detach() - q_t)[marked].mean())
    s_t = s * torch.exp(p) / torch.exp(p.detach())
    return -torch.minimum(s_t * a_t, torch.clamp(s_t, lo, hi) * a_t)


def setup(host, rng, lengths, shifts):
    """Datums whose behaviour logprobs sit `shift` below the policy's, so some sequence
    ratios fall inside the clip range and some outside."""
    host.create_adapter("m", AdapterConfig(rank=4, alpha=8, seed=3))
    randomize_adapter(host, "m", seed=5)
    model, params = plain_peft_model(host, "m")
    raw = []
    for n, shift in zip(lengths, shifts, strict=True):
        toks, targets = random_tokens(rng, n), random_tokens(rng, n)
        with torch.no_grad():
            p = token_logprobs(model, toks, targets).numpy()
        noise = rng.normal(0, 0.02, n)
        raw.append((toks, targets, (p - shift + noise).astype(np.float32)))
    return model, params, raw


def test_gspo_matches_the_published_token_level_definition(host) -> None:
    rng = np.random.default_rng(1)
    lengths, shifts = [9, 4, 15, 6], [0.0, 0.3, -0.4, 0.05]
    model, ref_params, raw = setup(host, rng, lengths, shifts)
    inputs = []
    for toks, targets, q in raw:
        n = len(toks)
        mask = (rng.uniform(size=n) < 0.7).astype(np.float32)
        mask[0] = 1.0  # at least one marked token
        adv = rng.normal(0, 1, n).astype(np.float32)
        inputs.append((toks, targets, q, adv, mask))
    data = [
        Datum(
            model_input=ModelInput.from_ints(toks),
            loss_fn_inputs={
                "target_tokens": targets,
                "logprobs": q,
                "advantages": adv,
                "sequence_ratio_mask": mask,
            },
        )
        for toks, targets, q, adv, mask in inputs
    ]
    out = host.forward_backward(
        "m", ForwardBackwardInput(data=data, loss_fn="gspo", loss_fn_config=CLIP)
    )
    total = torch.zeros((), dtype=torch.float64)
    for (toks, targets, q, adv, mask), result in zip(inputs, out.loss_fn_outputs, strict=True):
        terms = gspo_token_terms(token_logprobs(model, toks, targets), q, adv, mask, 0.9, 1.1)
        got = torch.from_numpy(result["elementwise_loss"].to_numpy()).double()
        torch.testing.assert_close(got, terms.detach(), **TOL)
        total = total + terms.sum()
    total.backward()
    assert math.isclose(out.metrics["loss:sum"], float(total.detach()), rel_tol=1e-5, abs_tol=1e-4)
    assert_grads_close(host.pool.parameters("m"), ref_params)


def test_uniform_advantages_give_the_papers_sequence_level_objective(host) -> None:
    """With one advantage per sequence and every token marked, the summed GSPO-token loss and
    its gradient equal |y|·(-min(s·A, clip(s)·A)) with the gradient flowing through s itself."""
    rng = np.random.default_rng(2)
    lengths, shifts = [7, 11, 5], [0.0, 0.25, -0.3]
    advantages = [1.5, -0.7, 2.0]
    model, ref_params, raw = setup(host, rng, lengths, shifts)
    data, total = [], torch.zeros((), dtype=torch.float64)
    for (toks, targets, q), a in zip(raw, advantages, strict=True):
        n = len(toks)
        data.append(
            Datum(
                model_input=ModelInput.from_ints(toks),
                loss_fn_inputs={
                    "target_tokens": targets,
                    "logprobs": q,
                    "advantages": [a] * n,
                    "sequence_ratio_mask": [1.0] * n,
                },
            )
        )
        p = token_logprobs(model, toks, targets)
        s = torch.exp((p - torch.tensor(q, dtype=torch.float64)).mean())
        total = total - n * torch.minimum(s * a, torch.clamp(s, 0.9, 1.1) * a)
    out = host.forward_backward(
        "m", ForwardBackwardInput(data=data, loss_fn="gspo", loss_fn_config=CLIP)
    )
    total.backward()
    assert math.isclose(out.metrics["loss:sum"], float(total.detach()), rel_tol=1e-5, abs_tol=1e-4)
    assert_grads_close(host.pool.parameters("m"), ref_params)


def gspo_datum(n: int = 3, **overrides) -> Datum:
    inputs = {
        "target_tokens": [1] * n,
        "logprobs": [-1.0] * n,
        "advantages": [1.0] * n,
        "sequence_ratio_mask": [1.0] * n,
        **overrides,
    }
    inputs = {k: v for k, v in inputs.items() if v is not None}
    return Datum(model_input=ModelInput.from_ints([1] * n), loss_fn_inputs=inputs)


@pytest.mark.parametrize(
    ("data", "config", "field"),
    [
        ([gspo_datum()], {"clip_high_threshold": 1.2}, "loss_fn_config.clip_low_threshold"),
        ([gspo_datum()], {**CLIP, "beta": 0.1}, "loss_fn_config.beta"),
        (
            [gspo_datum()],
            {**CLIP, "clip_low_threshold": "0.8"},
            "loss_fn_config.clip_low_threshold",
        ),
        (
            [gspo_datum(sequence_ratio_mask=None)],
            CLIP,
            "data[0].loss_fn_inputs.sequence_ratio_mask",
        ),
        (
            [gspo_datum(), gspo_datum(sequence_ratio_mask=[0.0, 0.0, 0.0])],
            CLIP,
            "data[1].loss_fn_inputs.sequence_ratio_mask",
        ),
        (
            [gspo_datum(clip_low_threshold=[0.9] * 3)],
            CLIP,
            "data[0].loss_fn_inputs.clip_low_threshold",
        ),
    ],
)
def test_bad_gspo_input_names_the_field(host, data, config, field) -> None:
    host.create_adapter("m", AdapterConfig(rank=2, seed=0))
    fwd = ForwardBackwardInput.model_construct(data=data, loss_fn="gspo", loss_fn_config=config)
    with pytest.raises(InvalidInput) as err:
        host.forward_backward("m", fwd)
    assert err.value.field == field
    assert all(p.grad is None for p in host.pool.parameters("m").values())
