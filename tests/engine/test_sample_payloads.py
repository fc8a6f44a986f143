"""Sample payloads as the control plane stores them (a SampleRequest's JSON) reach the engine whole."""

from __future__ import annotations

import numpy as np
import pytest

from loopwright.types import ModelInput, SampleRequest, SampleResponse, SamplingParams, TensorData
from workers.engine.adapters import AdapterConfig
from workers.engine.sampler import SampleJob
from workers.executor import run_samples

from .reference import randomize_adapter

PROMPT = [7, 1, 88, 3, 14, 15, 92]


@pytest.fixture
def trained(host):
    host.create_adapter("m", AdapterConfig(rank=4, seed=0))
    randomize_adapter(host, "m", seed=3, scale=0.2)
    return host


def stored(**fields) -> dict:
    """The payload the asample view stores for a request."""
    request = SampleRequest(
        prompt=ModelInput.from_ints(PROMPT),
        num_samples=2,
        sampling_params=SamplingParams(max_tokens=4, seed=5, stop=[]),
        sampling_session_id="s1",
        seq_id=1,
        **fields,
    )
    return request.model_dump(mode="json", exclude={"seq_id", "sampling_session_id", "type"})


def test_every_038_field_reaches_the_engine(trained) -> None:
    ids = np.full((6, 2), -1)
    ids[3:, 0] = [5, 6, 7]
    options = {
        "prompt_logprobs": True,
        "topk_prompt_logprobs": 2,
        "topk_sample_logprobs": 3,
        "prompt_logprobs_last_n": 2,
        "target_prompt_logprobs": TensorData.from_numpy(ids),
        "prompt_alt_tokens_k": 2,
        "record_stability_info": False,
    }
    (outcome,) = run_samples(trained, [(stored(**options), {"adapter": "m"})])
    assert outcome.ok, outcome.error
    direct = SampleJob.from_wire(
        PROMPT, 2, SamplingParams(max_tokens=4, seed=5, stop=[]), **options
    )
    (expected,) = trained.sample("m", [direct])
    assert outcome.result == expected.to_wire()
    response = SampleResponse.model_validate(outcome.result)
    assert all(len(step) == 3 for s in response.sequences for step in s.topk_logprobs or [])
    assert response.prompt_logprobs is not None and response.prompt_logprobs[:5] == [None] * 5
    assert response.target_prompt_logprobs is not None
    assert response.prompt_alt_tokens is not None


def test_the_openai_path_still_names_topk_logprobs(trained) -> None:
    payload = {**stored(), "topk_logprobs": 2}
    (outcome,) = run_samples(trained, [(payload, {"adapter": "m"})])
    assert outcome.ok
    assert all(len(step) == 2 for s in outcome.result["sequences"] for step in s["topk_logprobs"])


def test_a_refused_field_fails_its_request_alone_as_a_user_error(trained) -> None:
    wrong_rows = TensorData.from_numpy(np.zeros((3, 1), np.int64))
    bad, good = stored(target_prompt_logprobs=wrong_rows), stored(record_stability_info=True)
    refused, served = run_samples(trained, [(bad, {"adapter": "m"}), (good, {"adapter": "m"})])
    assert refused.category == "user" and "target_prompt_logprobs" in (refused.error or "")
    assert served.ok
