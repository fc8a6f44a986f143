"""Sampling with logits processors on the tiny model: every token is drawn from the law the
reference computes from a plain forward pass, the logprobs are of the law asked for, and a
seeded request draws the same tokens alone or packed with other sessions' requests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from loopwright.types import SamplingParams
from workers.engine.adapters import AdapterConfig
from workers.engine.sampler import SampleJob

from .peft_active import activate
from .processors_reference import Asked, drawable_logprobs, processed
from .reference import randomize_adapter
from .test_batched_sampling import assert_same, sessions
from .test_sampler import forward_logprobs


@pytest.fixture
def trained(host):
    host.create_adapter("m", AdapterConfig(rank=4, seed=0))
    randomize_adapter(host, "m", seed=3, scale=0.2)
    return host


def job(prompt, n=1, **params) -> SampleJob:
    return SampleJob.from_wire(prompt, n, SamplingParams(**params))


def asked_of(params: dict) -> Asked:
    bias = {int(k): v for k, v in (params.get("logit_bias") or {}).items()}
    fields = {k: v for k, v in params.items() if hasattr(Asked, k) and k != "logit_bias"}
    return Asked(**fields, logit_bias=bias)


def model_logits(host, model_id, tokens: list[int]) -> np.ndarray:
    """float32 logits of a plain forward over ``tokens`` (no KV cache, no batch)."""
    with torch.no_grad():
        activate(host.pool, model_id)
        return host.pool.model(input_ids=torch.tensor([tokens])).logits[0].float().numpy()


CASES = [
    {"temperature": 0.8, "repetition_penalty": 1.6},
    {"temperature": 1.2, "frequency_penalty": 1.5, "presence_penalty": 0.5},
    {"temperature": 1.0, "min_p": 0.05, "presence_penalty": -0.7},
    {"temperature": 0.9, "logit_bias": {"97": 4.0, "101": -100, "32": 2.5}, "top_p": 0.9},
    {"temperature": 1.1, "repetition_penalty": 0.8, "min_p": 0.02, "top_k": 40},
]


@pytest.mark.parametrize("params", CASES)
def test_each_token_is_drawn_from_the_reference_law_and_reports_its_logprob(
    trained, params
) -> None:
    prompt = [72, 101, 108, 108, 111, 32]
    (result,) = trained.sample("m", [job(prompt, 3, max_tokens=16, seed=11, stop=[], **params)])
    a = asked_of(params)
    for seq in result.sequences:
        logits = model_logits(trained, "m", prompt + seq.tokens)
        for t, (token, logprob) in enumerate(zip(seq.tokens, seq.logprobs, strict=True)):
            pre = processed(logits[len(prompt) - 1 + t], prompt, seq.tokens[:t], a)
            law = drawable_logprobs(pre, a)
            assert np.isfinite(law[token]), (t, token)
            assert abs(law[token] - logprob) <= 2e-3, (t, law[token], logprob)


def test_the_reported_law_changes_no_token_and_model_logprobs_are_the_trainers(trained) -> None:
    prompt = [10, 20, 30, 40]
    params = {"temperature": 0.7, "repetition_penalty": 1.3, "min_p": 0.05, "max_tokens": 12}
    params |= {"seed": 5, "stop": [], "logit_bias": {"65": 3.0}}
    sampled, model, both = trained.sample(
        "m",
        [job(prompt, 2, **params, logprobs_of=law) for law in ("sampled", "model", "both")],
    )
    for s, m, b in zip(sampled.sequences, model.sequences, both.sequences, strict=True):
        assert s.tokens == m.tokens == b.tokens
        assert s.model_logprobs is None and m.model_logprobs is None
        np.testing.assert_allclose(s.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)
        forward = forward_logprobs(trained, "m", prompt, s.tokens)
        np.testing.assert_allclose(m.logprobs, forward, atol=5e-4)
        np.testing.assert_allclose(b.model_logprobs, forward, atol=5e-4)
        assert not np.allclose(s.logprobs, forward, atol=1e-2)  # the laws differ here


def test_top_logprobs_are_of_the_reported_law(trained) -> None:
    prompt = [5, 6, 7]
    common = {"temperature": 0.5, "max_tokens": 6, "seed": 2, "stop": [], "top_k": 3}
    sampled, model = trained.sample(
        "m",
        [
            SampleJob.from_wire(
                prompt, 1, SamplingParams(**common, logprobs_of=law), topk_logprobs=5
            )
            for law in ("sampled", "model")
        ],
    )
    s, m = sampled.sequences[0], model.sequences[0]
    assert all(len(top) <= 3 for top in s.topk_logprobs)  # top_k removed the rest
    assert all(len(top) == 5 for top in m.topk_logprobs)
    logits = model_logits(trained, "m", prompt + m.tokens)
    for t, top in enumerate(m.topk_logprobs):
        lp = torch.log_softmax(torch.from_numpy(logits[len(prompt) - 1 + t]).double(), -1)
        assert [tok for tok, _ in top] == lp.topk(5).indices.tolist()


def test_forced_tokens_are_the_only_ones_and_banned_tokens_never_come(trained) -> None:
    forced = {"97": 100, "98": 100, "99": 100}
    (f,) = trained.sample("m", [job([1, 2], 4, max_tokens=20, seed=1, stop=[], logit_bias=forced)])
    assert {t for s in f.sequences for t in s.tokens} <= {97, 98, 99}
    free = trained.sample("m", [job([1, 2], 8, max_tokens=20, seed=1, stop=[])])[0]
    common = max(
        {t for s in free.sequences for t in s.tokens},
        key=lambda t: sum(s.tokens.count(t) for s in free.sequences),
    )
    banned = {str(common): -100}
    (b,) = trained.sample("m", [job([1, 2], 8, max_tokens=20, seed=1, stop=[], logit_bias=banned)])
    assert all(common not in s.tokens for s in b.sequences)


def test_greedy_with_processors_takes_the_processed_argmax(trained) -> None:
    prompt = [50, 51, 52]
    params = {"temperature": 0.0, "repetition_penalty": 2.0, "frequency_penalty": 1.0}
    (result,) = trained.sample("m", [job(prompt, 2, max_tokens=10, stop=[], **params)])
    first, second = result.sequences
    assert first.tokens == second.tokens
    a = asked_of(params)
    logits = model_logits(trained, "m", prompt + first.tokens)
    for t, token in enumerate(first.tokens):
        pre = processed(logits[len(prompt) - 1 + t], prompt, first.tokens[:t], a)
        assert token == int(np.argmax(pre))
        untempered = torch.log_softmax(torch.from_numpy(pre).double(), -1)
        assert abs(float(untempered[token]) - first.logprobs[t]) <= 2e-3


def random_controlled_job(rng: np.random.Generator) -> SampleJob:
    prompt = rng.integers(0, 256, size=int(rng.integers(1, 10))).tolist()
    params: dict = {"max_tokens": int(rng.integers(1, 14)), "seed": int(rng.integers(1 << 40))}
    kind = int(rng.integers(6))
    if kind == 0:
        params |= {"repetition_penalty": 1.5, "temperature": 0.9, "stop": []}
    elif kind == 1:
        params |= {"frequency_penalty": 1.0, "presence_penalty": 0.5, "min_p": 0.05}
    elif kind == 2:
        params |= {"logit_bias": {"97": 100, "98": 100, "10": 100}, "stop": []}
    elif kind == 3:
        params |= {"regex": "[a-f]{2,5}-[0-9]+", "temperature": 1.3}
    elif kind == 4:
        params |= {"temperature": 0.0, "logit_bias": {"32": 5.0}, "logprobs_of": "both"}
    # kind 5: no control at all, beside the others
    return SampleJob.from_wire(
        prompt,
        int(rng.integers(1, 4)),
        SamplingParams(**params),
        topk_logprobs=int(rng.choice([0, 2])),
    )


@pytest.mark.parametrize("overrides", [{}, {"max_sample_rows": 4, "max_loaded_adapters": 2}])
def test_seeded_requests_draw_the_same_alone_or_packed(make_host, overrides) -> None:
    """Several sessions (and the base model) with mixed controls in one pass: each request
    gets, token for token, what it gets alone; with few rows, requests wait and join later."""
    rng = np.random.default_rng(7)
    host = make_host(**overrides)
    ids = [*sessions(host, rng, 3), None]
    requests = [
        (ids[int(rng.integers(len(ids)))], [random_controlled_job(rng) for _ in range(2)])
        for _ in range(8)
    ]
    together = host.sample_many(requests)
    again = host.sample_many(list(reversed(requests)))[::-1]
    for (model_id, jobs), packed, reordered in zip(requests, together, again, strict=True):
        assert not isinstance(packed, Exception), packed
        alone = host.sample(model_id, jobs)
        for got, other, one in zip(packed, reordered, alone, strict=True):
            assert_same(got, one)
            assert_same(other, one)
            if one.sequences[0].model_logprobs is not None:
                for a, b in zip(got.sequences, one.sequences, strict=True):
                    np.testing.assert_allclose(a.model_logprobs, b.model_logprobs, atol=1e-5)
