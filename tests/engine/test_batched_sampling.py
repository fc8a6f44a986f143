"""Many sessions sampling in one continuous batch: each request gets what it gets alone.

Seeded tokens are identical whatever else runs beside them (other adapters, other requests, a
full batch that makes requests wait and join later); logprobs agree within 1e-5 and, at
temperature 1 without truncation, equal a float64 plain-peft forward of the sampled tokens.
"""

from __future__ import annotations

import numpy as np
import peft
import pytest
import torch
from transformers import AutoModelForCausalLM

from loopwright.types import SamplingParams
from workers.engine.adapters import AdapterConfig
from workers.engine.sampler import SampleJob

from .reference import random_tokens, randomize_adapter


def plain_peft_model64(host, model_id: str | None) -> torch.nn.Module:
    base = AutoModelForCausalLM.from_pretrained(host.materialized.path, dtype=torch.float64)
    if model_id is None:
        return base
    cfg = host.pool.peft_config(model_id)
    model = peft.get_peft_model(
        base, peft.LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, target_modules=cfg.target_modules)
    )
    state = {k: v.detach().double() for k, v in host.pool.state_dict(model_id).items()}
    peft.set_peft_model_state_dict(model, state)
    return model


def sessions(host, rng: np.random.Generator, count: int) -> list[str]:
    ids = []
    for k in range(count):
        model_id = f"s{k}"
        host.create_adapter(
            model_id,
            AdapterConfig(rank=int(rng.choice([1, 4, 8, 16])), alpha=8.0, seed=k),
        )
        randomize_adapter(host, model_id, seed=50 + k, scale=0.1)
        ids.append(model_id)
    return ids


def random_job(rng: np.random.Generator) -> SampleJob:
    prompt = random_tokens(rng, int(rng.integers(1, 12)))
    kind = int(rng.integers(4))
    params: dict = {"max_tokens": int(rng.integers(1, 14)), "seed": int(rng.integers(1 << 40))}
    if kind == 0:
        params.update(temperature=1.0, stop=[])
    elif kind == 1:
        params.update(temperature=0.7, top_k=int(rng.integers(1, 20)), top_p=0.9)
    elif kind == 2:
        params.update(temperature=0.0, stop=[int(rng.integers(256))])
    else:
        params.update(temperature=1.3, stop=["a", "e"])
    return SampleJob.from_wire(
        prompt,
        int(rng.integers(1, 4)),
        SamplingParams(**params),
        prompt_logprobs=bool(rng.integers(2)) and len(prompt) > 1,
        topk_logprobs=int(rng.choice([0, 3])),
    )


def assert_same(got, alone) -> None:
    assert len(got.sequences) == len(alone.sequences)
    for a, b in zip(got.sequences, alone.sequences, strict=True):
        assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)
        if b.topk_logprobs is not None:
            for x, y in zip(a.topk_logprobs, b.topk_logprobs, strict=True):
                assert [t for t, _ in x] == [t for t, _ in y]
    if alone.prompt_logprobs is not None:
        np.testing.assert_allclose(
            got.prompt_logprobs[1:], alone.prompt_logprobs[1:], rtol=1e-5, atol=1e-5
        )
    assert got.cache_hit_tokens == alone.cache_hit_tokens


@pytest.mark.parametrize("overrides", [{}, {"max_sample_rows": 3, "max_loaded_adapters": 2}])
def test_sampling_together_equals_each_request_alone(make_host, overrides) -> None:
    rng = np.random.default_rng(3)
    host = make_host(**overrides)
    ids = [*sessions(host, rng, 4), None]
    requests = [
        (
            ids[int(rng.integers(len(ids)))],
            [random_job(rng) for _ in range(int(rng.integers(1, 3)))],
        )
        for _ in range(9)
    ]
    together = host.sample_many(requests)
    for (model_id, jobs), results in zip(requests, together, strict=True):
        assert not isinstance(results, Exception), results
        alone = host.sample(model_id, jobs)
        for got, one in zip(results, alone, strict=True):
            assert_same(got, one)
    # at temperature 1 with no truncation, a sampled token's logprob is the model's
    for (model_id, jobs), results in zip(requests, together, strict=True):
        for job, result in zip(jobs, results, strict=True):
            if job.temperature != 1.0 or job.top_k != -1 or job.top_p != 1.0:
                continue
            model = plain_peft_model64(host, model_id)
            for seq in result.sequences:
                full = job.prompt + seq.tokens
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([full[:-1]])).logits[0]
                lp = torch.log_softmax(logits, -1)[
                    torch.arange(len(full) - 1), torch.tensor(full[1:])
                ][len(job.prompt) - 1 :]
                np.testing.assert_allclose(seq.logprobs, lp.numpy(), rtol=1e-5, atol=1e-5)


def test_a_sample_that_stops_early_leaves_the_others_unchanged(host) -> None:
    """Each sequence draws from its own stream: another sample stopping changes nothing."""
    rng = np.random.default_rng(0)
    (model_id,) = sessions(host, rng, 1)
    prompt = [5, 6, 7]

    def run(stop):
        job = SampleJob.from_wire(prompt, 3, SamplingParams(max_tokens=20, seed=77, stop=stop))
        return host.sample(model_id, [job])[0].sequences

    free = run([])
    stop_tok = free[0].tokens[1]
    stopped = run([stop_tok])
    for f, s in zip(free, stopped, strict=True):
        cut = f.tokens.index(stop_tok) + 1 if stop_tok in f.tokens else len(f.tokens)
        assert s.tokens == f.tokens[:cut]
    assert stopped[0].stop_reason == "stop" and len(stopped[0].tokens) == 2
    assert any(len(s.tokens) > 2 for s in stopped[1:])  # the others went on


def test_samples_share_their_prompt_prefill(host) -> None:
    job = SampleJob(prompt=[1, 2, 3, 4, 5], num_samples=4, max_tokens=2, seed=1)
    (result,) = host.sample(None, [job])
    assert result.to_wire()["prompt_cache_hit_tokens"] == 3 * 5
    (single,) = host.sample(None, [SampleJob(prompt=[1, 2, 3], max_tokens=2, seed=1)])
    assert single.to_wire()["prompt_cache_hit_tokens"] == 0


def test_a_bad_request_fails_alone(host) -> None:
    rng = np.random.default_rng(1)
    (model_id,) = sessions(host, rng, 1)
    good = [SampleJob(prompt=[1, 2], max_tokens=3, seed=4)]
    bad = [SampleJob(prompt=[1, 999], max_tokens=3)]
    out = host.sample_many([(model_id, good), (model_id, bad), ("nobody", good)])
    assert [s.tokens for s in out[0][0].sequences] == [
        s.tokens for s in host.sample(model_id, good)[0].sequences
    ]
    assert out[1].field == "prompt"
    assert "nobody" in str(out[2])
