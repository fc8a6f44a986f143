"""Our SDK sends the sampling controls (token ids as decimal keys, ranges checked before
sending); the official tinker SDK (0.24.1 here, 0.38 alike) cannot: its request carries only
tinker's own fields, as docs/sampling.md says."""

from __future__ import annotations

import pytest
from pydantic import ConfigDict, ValidationError

from loopwright._runtime import wire
from loopwright.types import ModelInput, SampleRequest, SamplingParams

tt = pytest.importorskip("tinker.types")

CONTROLS = {
    "min_p": 0.05,
    "repetition_penalty": 1.2,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "logit_bias": {"198": -100.0},
    "logprobs_of": "both",
}


def test_our_request_carries_the_controls() -> None:
    params = SamplingParams(max_tokens=8, json_schema={"type": "object"}, **CONTROLS)
    body = wire(SampleRequest(prompt=ModelInput.from_ints([1, 2]), sampling_params=params))
    sent = body["sampling_params"]
    assert {k: sent[k] for k in CONTROLS} == CONTROLS
    assert sent["json_schema"] == {"type": "object"} and "regex" not in sent
    assert SamplingParams(logit_bias={198: 1}).logit_bias == {"198": 1.0}  # ints become keys


@pytest.mark.parametrize(
    "bad",
    [
        {"min_p": 1.01},
        {"repetition_penalty": 0},
        {"presence_penalty": -2.01},
        {"logit_bias": {"0x1": 1}},
        {"logit_bias": {str(i): 1 for i in range(1025)}},
        {"regex": "a" * 4097},
        {"json_schema": {"a": {"b": 1}} | {"x": "y" * 33_000}},
        {"regex": "a", "grammar": 'start: "a"'},
        {"logprobs_of": "raw"},
    ],
)
def test_out_of_range_controls_are_refused_before_sending(bad: dict) -> None:
    with pytest.raises(ValidationError):
        SamplingParams(max_tokens=1, **bad)


def test_the_official_sdk_cannot_send_them() -> None:
    class Keeping(tt.SamplingParams):  # even a subclass that keeps unknown fields
        model_config = ConfigDict(frozen=True, extra="allow")

    for params in (tt.SamplingParams(max_tokens=8, **CONTROLS), Keeping(max_tokens=8, **CONTROLS)):
        request = tt.SampleRequest(prompt=tt.ModelInput.from_ints([1, 2]), sampling_params=params)
        sent = request.model_dump(exclude_none=True, mode="json")["sampling_params"]
        assert not set(sent) & set(CONTROLS), sent
