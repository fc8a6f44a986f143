"""What a sample request asks about its prompt (tinker 0.38's fields), against a plain peft forward."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from loopwright.types import SamplingParams, TensorData
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import InvalidInput
from workers.engine.sampler import SampleJob

from .reference import plain_peft_model, randomize_adapter

TOL = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture
def trained(host):
    host.create_adapter("m", AdapterConfig(rank=4, seed=0))
    randomize_adapter(host, "m", seed=3, scale=0.2)
    return host


def reference_logits(host, prompt: list[int]) -> torch.Tensor:
    """Logits at every prompt position from an independent, unbatched peft model."""
    model, _ = plain_peft_model(host, "m")
    with torch.no_grad():
        return model(input_ids=torch.tensor([prompt])).logits[0].double()


def job(prompt, n=1, params=None, **options) -> SampleJob:
    sp = SamplingParams(**(params or {"max_tokens": 2, "seed": 0}))
    return SampleJob.from_wire(prompt, n, sp, **options)


def test_last_n_scores_only_the_suffix_in_a_mixed_batch(trained) -> None:
    short, long = [5, 9, 200, 31], [1, 50, 99, 7, 7, 7, 200, 3, 64, 12]
    jobs = [
        job(long, prompt_logprobs=True, topk_prompt_logprobs=3, prompt_logprobs_last_n=3),
        job(short, prompt_logprobs=True),  # the whole prompt, shorter than the other
        job([8, 8, 8]),  # asks nothing about its prompt
    ]
    suffix, whole, plain = trained.sample("m", jobs)
    lp = torch.log_softmax(reference_logits(trained, long), -1)
    assert suffix.prompt_logprobs[:7] == [None] * 7
    expected = [float(lp[i - 1, long[i]]) for i in range(7, 10)]
    np.testing.assert_allclose(suffix.prompt_logprobs[7:], expected, **TOL)
    assert suffix.topk_prompt_logprobs[:7] == [None] * 7
    for i, top in zip(range(7, 10), suffix.topk_prompt_logprobs[7:], strict=True):
        assert [t for t, _ in top] == lp[i - 1].topk(3).indices.tolist()
    lp_short = torch.log_softmax(reference_logits(trained, short), -1)
    expected = [float(lp_short[i - 1, short[i]]) for i in range(1, 4)]
    np.testing.assert_allclose(whole.prompt_logprobs[1:], expected, **TOL)
    assert plain.prompt_logprobs is None and plain.topk_prompt_logprobs is None
    alone = trained.compute_logprobs("m", long, last_n=3)
    assert alone[:7] == [None] * 7
    np.testing.assert_allclose(alone[7:], suffix.prompt_logprobs[7:], **TOL)


def targets(rows: int, width: int, seed: int, first_row: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 259, size=(rows, width))
    ids[rng.uniform(size=ids.shape) < 0.3] = -1
    ids[:first_row] = -1
    ids[first_row, 0] = 17  # the first scored row names at least one id
    return ids


def expected_target_logprobs(lp: torch.Tensor, ids: np.ndarray) -> np.ndarray:
    out = np.zeros(ids.shape, dtype=np.float64)
    for (i, j), token in np.ndenumerate(ids):
        if token != -1:
            out[i, j] = float(lp[i, token])  # row i scores prompt position i + 1
    return out


def sparse(ids: np.ndarray) -> TensorData:
    """CSR with -1 as the implicit value, as tinker's from_torch_sparse(pad_value=-1) sends."""
    crow, cols, data = [0], [], []
    for row in ids:
        named = np.flatnonzero(row != -1)
        cols += named.tolist()
        data += row[named].tolist()
        crow.append(len(cols))
    return TensorData(
        data=data,
        dtype="int64",
        shape=list(ids.shape),
        sparse_crow_indices=crow,
        sparse_col_indices=cols,
    )


def test_target_prompt_logprobs_dense_and_sparse_keep_their_layout(trained) -> None:
    prompt = [3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62]
    dense_ids, sparse_ids = targets(10, 4, seed=1), targets(10, 6, seed=2, first_row=6)
    jobs = [
        job(prompt, target_prompt_logprobs=TensorData.from_numpy(dense_ids)),
        job(  # last_n does not narrow target_prompt_logprobs
            prompt,
            prompt_logprobs=True,
            prompt_logprobs_last_n=2,
            target_prompt_logprobs=sparse(sparse_ids).model_dump(mode="json"),
        ),
    ]
    dense_out, sparse_out = trained.sample("m", jobs)
    lp = torch.log_softmax(reference_logits(trained, prompt), -1)
    got = dense_out.to_response().target_prompt_logprobs
    assert got is not None and got.dtype == "float32" and not got.is_sparse
    np.testing.assert_allclose(got.to_numpy(), expected_target_logprobs(lp, dense_ids), **TOL)
    request, answer = sparse(sparse_ids), sparse_out.to_response().target_prompt_logprobs
    assert answer is not None and answer.shape == [10, 6] and answer.dtype == "float32"
    assert answer.sparse_crow_indices == request.sparse_crow_indices
    assert answer.sparse_col_indices == request.sparse_col_indices
    want = expected_target_logprobs(lp, sparse_ids)
    np.testing.assert_allclose(answer.to_numpy(), want, **TOL)
    assert sparse_out.prompt_logprobs[:9] == [None] * 9


def top1_statistic(tokens_R_K: np.ndarray, p_R_V: np.ndarray) -> float:
    """Σ over positions of z², z comparing how often the law's likeliest token was drawn with
    k·p: about χ² with one degree of freedom per position when the draws follow the law."""
    k = tokens_R_K.shape[1]
    best = p_R_V.argmax(-1)
    p = p_R_V[np.arange(len(best)), best]
    counts = (tokens_R_K == best[:, None]).sum(-1)
    variance = np.maximum(k * p * (1 - p), 1e-6)
    return float(((counts - k * p) ** 2 / variance).sum())


def test_alternative_tokens_are_drawn_at_the_temperature_with_model_logprobs(trained) -> None:
    prompt = [1, 50, 99, 7, 7, 7, 200, 3, 64, 12, 90, 4, 4]
    params = {"max_tokens": 3, "seed": 11, "temperature": 2.0, "stop": []}
    (result,) = trained.sample("m", [job(prompt, 2, params, prompt_alt_tokens_k=512)])
    alt = result.to_response().prompt_alt_tokens
    assert alt is not None and alt.tokens.shape == alt.logprobs.shape == [12, 512]
    assert alt.tokens.dtype == "int64" and alt.logprobs.dtype == "float32"
    tokens_R_K, logprobs_R_K = alt.tokens.to_numpy(), alt.logprobs.to_numpy()
    logits = reference_logits(trained, prompt)[:-1]
    lp = torch.log_softmax(logits, -1).numpy()
    np.testing.assert_allclose(logprobs_R_K, np.take_along_axis(lp, tokens_R_K, -1), **TOL)
    bound = 12 + 10 * (2 * 12) ** 0.5  # 12 degrees of freedom, ten standard deviations
    assert top1_statistic(tokens_R_K, torch.softmax(logits / 2.0, -1).numpy()) < bound
    assert top1_statistic(tokens_R_K, np.exp(lp)) > 10 * bound  # not the untempered law
    # Its own random stream: the same seed gives the same draws, and the samples are those of
    # the same request without alternatives.
    (again,) = trained.sample("m", [job(prompt, 2, params, prompt_alt_tokens_k=512)])
    assert again.to_response().prompt_alt_tokens == alt
    (without,) = trained.sample("m", [job(prompt, 2, params)])
    assert [s.tokens for s in without.sequences] == [s.tokens for s in result.sequences]


def test_greedy_alternatives_repeat_the_likeliest_token(trained) -> None:
    prompt = [9, 8, 7, 6, 5]
    params = {"max_tokens": 1, "temperature": 0.0}
    (result,) = trained.sample("m", [job(prompt, 1, params, prompt_alt_tokens_k=3)])
    alt = result.to_response().prompt_alt_tokens
    lp = torch.log_softmax(reference_logits(trained, prompt)[:-1], -1)
    best = lp.argmax(-1, keepdim=True).expand(4, 3)
    assert alt is not None and alt.tokens.to_numpy().tolist() == best.tolist()
    np.testing.assert_allclose(alt.logprobs.to_numpy(), lp.gather(-1, best).numpy(), **TOL)
    (single,) = trained.sample(
        "m", [job([42], 1, params, prompt_alt_tokens_k=2, prompt_logprobs=True)]
    )
    empty = single.to_response().prompt_alt_tokens
    assert empty is not None and empty.tokens.shape == empty.logprobs.shape == [0, 2]
    assert single.prompt_logprobs == [None]


def test_the_result_json_is_the_038_layout_and_reads_back(trained) -> None:
    prompt = [3, 1, 4, 1, 5]
    asked = job(
        prompt,
        2,
        prompt_logprobs=True,
        topk_prompt_logprobs=2,
        topk_sample_logprobs=2,
        target_prompt_logprobs=TensorData.from_numpy(targets(4, 1, seed=3)),
        prompt_alt_tokens_k=1,
        prompt_logprobs_last_n=2,
    )
    full, bare = (r.to_wire() for r in trained.sample("m", [asked, job(prompt)]))
    keys = {
        "sequences",
        "type",
        "prompt_logprobs",
        "topk_prompt_logprobs",
        "prompt_cache_hit_tokens",
        "target_prompt_logprobs",
        "prompt_alt_tokens",
    }
    assert set(full) == set(bare) == keys
    # tinker 0.38's keys; sequence_id null here (the control plane stamps each result with
    # `<request_id>:<i>`); Loopwright's model_logprobs (null unless logprobs_of="both")
    assert {
        "stop_reason",
        "tokens",
        "logprobs",
        "topk_logprobs",
        "sequence_id",
        "model_logprobs",
    } == set(full["sequences"][0])
    # the second of two samples reuses the prompt's prefill; a single sample reuses nothing
    assert full["prompt_cache_hit_tokens"] == len(prompt) and bare["prompt_cache_hit_tokens"] == 0
    assert all(bare[k] is None for k in keys - {"sequences", "type", "prompt_cache_hit_tokens"})
    assert bare["sequences"][0]["topk_logprobs"] is None
    assert full["prompt_logprobs"][:3] == [None, None, None]
    assert set(full["target_prompt_logprobs"]) >= {"data", "dtype", "shape"}
    assert set(full["prompt_alt_tokens"]) == {"tokens", "logprobs"}
    assert all(len(step) == 2 for step in full["sequences"][0]["topk_logprobs"])


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"prompt_logprobs_last_n": 2}, "prompt_logprobs_last_n", "requires prompt_logprobs"),
        ({"prompt_logprobs": True, "prompt_logprobs_last_n": 0}, "prompt_logprobs_last_n", "[1,"),
        ({"prompt_logprobs": True, "prompt_logprobs_last_n": 5}, "prompt_logprobs_last_n", "= 4]"),
        ({"prompt_alt_tokens_k": -1}, "prompt_alt_tokens_k", "≥ 0"),
        ({"prompt_alt_tokens_k": 20000}, "prompt_alt_tokens_k", "65536"),
        ({"topk_sample_logprobs": 21}, "topk_sample_logprobs", "[0, 20]"),
        (
            {"target_prompt_logprobs": TensorData.from_numpy(np.zeros((4, 2), np.float32))},
            "target_prompt_logprobs",
            "int64",
        ),
        (
            {"target_prompt_logprobs": TensorData.from_numpy(np.zeros(4, np.int64))},
            "target_prompt_logprobs",
            "2-D",
        ),
        (
            {"target_prompt_logprobs": TensorData.from_numpy(np.zeros((5, 1), np.int64))},
            "target_prompt_logprobs",
            "expected len(prompt) - 1 = 4",
        ),
        (
            {"target_prompt_logprobs": TensorData.from_numpy(np.full((4, 2), -1))},
            "target_prompt_logprobs",
            "names no token",
        ),
        (
            {"target_prompt_logprobs": TensorData.from_numpy(np.array([[1], [2], [259], [3]]))},
            "target_prompt_logprobs",
            "259 is outside",
        ),
        (
            {"target_prompt_logprobs": TensorData.from_numpy(np.array([[1], [2], [-2], [3]]))},
            "target_prompt_logprobs",
            "-2 is outside",
        ),
    ],
)
def test_bad_options_name_the_field_and_the_limit(trained, options, field, message) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)) as err:
        trained.sample("m", [job([1, 2, 3, 4, 5], **options)])
    assert err.value.field == field


def test_target_cost_is_bounded_like_a_top_k_width(trained) -> None:
    prompt = list(range(256)) * 2  # 512 tokens; 512 × 259 distinct ids > 1024 × 64
    ids = np.tile(np.arange(259), (511, 1))
    with pytest.raises(InvalidInput, match="distinct ids = 512 × 259 exceeds") as err:
        trained.sample("m", [job(prompt, target_prompt_logprobs=TensorData.from_numpy(ids))])
    assert err.value.field == "target_prompt_logprobs"
