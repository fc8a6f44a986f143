"""Top logprobs of generated tokens, checked against an independent forward pass (plain peft).

The engine decodes with an fp32 KV cache and the reference runs the whole sequence at once in
float64, so values agree to ``ATOL``: float32 decoding with a large-logit adapter is off by up to
1.1e-3 at some positions, depending on the thread count and the transformers release (a wrong
temperature or law is off by far more).
"""

from __future__ import annotations

import math

import pytest
import torch

from loopwright.types import SamplingParams
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import InvalidInput
from workers.engine.sampler import SampleJob

from .reference import plain_peft_model, randomize_adapter

ATOL = 2e-3


@pytest.fixture
def trained(host):
    host.create_adapter("m", AdapterConfig(rank=4, seed=0))
    randomize_adapter(host, "m", seed=5, scale=0.2)
    return host


def job(prompt, n=1, k=5, **params) -> SampleJob:
    return SampleJob.from_wire(prompt, n, SamplingParams(**params), topk_logprobs=k)


def reference_logits(host, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Logits (float64) predicting each generated token, from a fresh peft model."""
    model, _ = plain_peft_model(host, "m", torch.float64)
    full = prompt + tokens
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([full])).logits[0].double()
    return logits[len(prompt) - 1 : len(full) - 1]


def test_top_logprobs_at_temperature_one_match_the_model(trained) -> None:
    prompt = [65, 66, 67, 68]
    (result,) = trained.sample("m", [job(prompt, 3, k=5, max_tokens=12, seed=4, stop=[])])
    for seq in result.sequences:
        assert seq.topk_logprobs is not None and len(seq.topk_logprobs) == len(seq.tokens)
        lp_T_V = torch.log_softmax(reference_logits(trained, prompt, seq.tokens), -1)
        for pos, (token, logprob, top) in enumerate(
            zip(seq.tokens, seq.logprobs, seq.topk_logprobs, strict=True)
        ):
            want = lp_T_V[pos].topk(5)
            assert [t for t, _ in top] == want.indices.tolist()
            assert (
                max(abs(v - w) for (_, v), w in zip(top, want.values.tolist(), strict=True)) < ATOL
            )
            assert abs(logprob - float(lp_T_V[pos, token])) < ATOL
            if token in dict(top):
                assert abs(dict(top)[token] - logprob) < 1e-6  # one law for both


def test_top_logprobs_follow_temperature_and_nucleus(trained) -> None:
    prompt, temperature, top_p = [70, 71, 72], 0.7, 0.5
    (result,) = trained.sample(
        "m",
        [
            job(
                prompt,
                4,
                k=20,
                max_tokens=10,
                temperature=temperature,
                top_p=top_p,
                seed=1,
                stop=[],
            )
        ],
    )
    for seq in result.sequences:
        probs_T_V = torch.softmax(reference_logits(trained, prompt, seq.tokens) / temperature, -1)
        for pos, (token, top) in enumerate(zip(seq.tokens, seq.topk_logprobs, strict=True)):
            order = probs_T_V[pos].argsort(descending=True).tolist()
            nucleus, mass = [], 0.0
            for t in order:
                if mass >= top_p:
                    break
                nucleus.append(t)
                mass += float(probs_T_V[pos, t])
            expected = [(t, math.log(float(probs_T_V[pos, t]) / mass)) for t in nucleus[:20]]
            assert token in nucleus
            assert [t for t, _ in top] == [t for t, _ in expected]
            assert max(abs(v - w) for (_, v), (_, w) in zip(top, expected, strict=True)) < ATOL


def test_greedy_top_logprobs_are_untempered_and_lead_with_the_pick(trained) -> None:
    prompt = [3, 4, 5]
    (result,) = trained.sample("m", [job(prompt, 1, k=3, max_tokens=6, temperature=0.0, stop=[])])
    seq = result.sequences[0]
    lp_T_V = torch.log_softmax(reference_logits(trained, prompt, seq.tokens), -1)
    for pos, (token, top) in enumerate(zip(seq.tokens, seq.topk_logprobs, strict=True)):
        assert top[0][0] == token
        assert [t for t, _ in top] == lp_T_V[pos].topk(3).indices.tolist()
        assert abs(top[0][1] - float(lp_T_V[pos, token])) < ATOL


def test_only_jobs_that_ask_get_top_logprobs(trained) -> None:
    plain = SampleJob.from_wire([9, 9], 2, SamplingParams(max_tokens=4, seed=0, stop=[]))
    asking = job([1, 2, 3], 2, k=2, max_tokens=4, seed=0, stop=[])
    without, with_top = trained.sample("m", [plain, asking])
    assert all(s.topk_logprobs is None for s in without.sequences)
    assert all(len(s.topk_logprobs) == 4 for s in with_top.sequences)
    assert all(len(step) == 2 for s in with_top.sequences for step in s.topk_logprobs)
    assert all(s["topk_logprobs"] is None for s in without.to_wire()["sequences"])
    wire = with_top.to_wire()["sequences"][0]["topk_logprobs"]
    assert wire == [[[t, v] for t, v in step] for step in with_top.sequences[0].topk_logprobs]


@pytest.mark.parametrize("k", [-1, 21])
def test_bad_topk_logprobs_names_the_field(trained, k) -> None:
    with pytest.raises(InvalidInput, match="topk_sample_logprobs") as err:
        trained.sample("m", [job([1, 2], 1, k=k, max_tokens=2)])
    assert err.value.field == "topk_sample_logprobs"
