"""The sampling controls on /v1 and on the Tinker wire, in process with the tiny model's worker:
processors and logprobs together, ``response_format`` answers that satisfy their schema over many
seeds, the model's logprobs equal to the trainer's, and every out-of-range value a 400 naming
the parameter (never a 5xx)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from openai.types.chat import ChatCompletion

from controlplane.training_sessions.models import Operation
from tests.support.wire import result

from . import test_api
from .test_api import HI, error_of, v1

world, drained = test_api.world, test_api.drained  # the fixtures of test_api, here too

pytestmark = pytest.mark.django_db

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def chat(person, model: str, **body) -> dict:
    r = v1(person, "chat/completions", {"model": model, "messages": HI, **body})
    assert r.status_code == 200, r.content
    return ChatCompletion.model_validate(r.json()).model_dump()


def test_every_processor_with_logprobs_and_top_logprobs(alice, world) -> None:
    body = chat(
        alice,
        world["model"],
        max_tokens=12,
        n=2,
        seed=4,
        temperature=0.9,
        min_p=0.02,
        repetition_penalty=1.3,
        presence_penalty=0.4,
        frequency_penalty=0.6,
        logit_bias={"97": 100, "98": 100, "99": 100, "258": 100},
        logprobs=True,
        top_logprobs=3,
    )
    for choice in body["choices"]:
        assert set(choice["message"]["content"]) <= set("abc")  # forced: a, b, c or the end
        tokens = choice["logprobs"]["content"]
        assert len(tokens) == len(choice["message"]["content"])
        for token in tokens:
            assert token["logprob"] <= 0 and 1 <= len(token["top_logprobs"]) <= 3
            assert {t["token"] for t in token["top_logprobs"]} <= {"a", "b", "c", "</s>"}


@pytest.mark.parametrize("strict", [True, None])
def test_json_schema_answers_satisfy_the_schema_over_many_seeds(alice, world, strict) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    if strict is not None:
        fmt["json_schema"]["strict"] = strict
    for seed in range(6):
        body = chat(alice, world["model"], response_format=fmt, n=4, seed=seed, temperature=1.2)
        for choice in body["choices"]:
            assert choice["finish_reason"] == "stop"
            jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)


def test_json_object_answers_are_objects(alice, world) -> None:
    body = chat(
        alice,
        world["model"],
        response_format={"type": "json_object"},
        n=4,
        seed=1,
        max_tokens=300,
        temperature=0.3,
    )
    finished = [c for c in body["choices"] if c["finish_reason"] == "stop"]
    assert finished
    for choice in finished:
        assert isinstance(json.loads(choice["message"]["content"]), dict)


def test_model_logprobs_are_the_trainers_whatever_the_controls(alice, runtime, world) -> None:
    """logprobs_mode "model": each token's logprob is what the trainer computes for it (the
    Tinker wire's prompt logprobs of the same tokens), though temperature and processors drew it."""
    r = v1(
        alice,
        "completions",
        {
            "model": world["model"],
            "prompt": [5, 6, 7],
            "max_tokens": 8,
            "seed": 2,
            "temperature": 0.6,
            "repetition_penalty": 1.5,
            "min_p": 0.05,
            "logprobs": 0,
            "logprobs_mode": "model",
            "stop": None,
        },
    )
    assert r.status_code == 200, r.content
    op = Operation.objects.get(kind="sample")
    tokens = op.result["sequences"][0]["tokens"]
    got = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    eph = result(
        alice,
        runtime,
        alice.post(
            "save_weights_for_sampler",
            {"model_id": world["model"], "seq_id": 2, "sampling_session_seq_id": 0},
        ).json(),
    )
    scored = result(
        alice,
        runtime,
        alice.post(
            "asample",
            {
                "sampling_session_id": eph["sampling_session_id"],
                "seq_id": 0,
                "num_samples": 1,
                "prompt": {"chunks": [{"tokens": [5, 6, 7, *tokens]}]},
                "sampling_params": {"max_tokens": 1},
                "prompt_logprobs": True,
            },
        ).json(),
    )
    trainer = scored["prompt_logprobs"][3:]
    shown = [t for t in tokens if t != 258]  # the end-of-sequence token is not listed
    np.testing.assert_allclose(got, trainer[: len(shown)], atol=5e-4)


def test_an_explicit_zero_is_the_same_request_as_none(alice, world) -> None:
    base = {"model": world["model"], "prompt": "ab", "max_tokens": 3, "seed": 9}
    v1(alice, "completions", base)
    v1(
        alice,
        "completions",
        {
            **base,
            "presence_penalty": 0,
            "frequency_penalty": 0.0,
            "repetition_penalty": 1,
            "min_p": 0,
            "logit_bias": {},
        },
    )
    first, second = Operation.objects.filter(kind="sample").order_by("created_at")
    assert first.payload == second.payload
    assert first.result["sequences"] == second.result["sequences"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"min_p": 1.5}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"repetition_penalty": -1}, "repetition_penalty"),
        ({"presence_penalty": 2.01}, "presence_penalty"),
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"1": 100.5}}, "logit_bias"),
        ({"logit_bias": {"-1": 1}}, "logit_bias"),
        ({"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias"),
        ({"logprobs_mode": "raw"}, "logprobs_mode"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "response_format.json_schema.json_schema.name",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "objekt"}},
                }
            },
            "response_format",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "strict": True,
                        "schema": {"type": "object", "if": {}},
                    },
                }
            },
            "response_format",
        ),
    ],
)
def test_out_of_range_values_are_a_400_naming_the_param(alice, world, extra, param) -> None:
    r = v1(alice, "chat/completions", {"model": world["model"], "messages": HI, **extra})
    err = error_of(r, 400, param)
    assert err["type"] == "invalid_request_error" and err["message"].startswith(param)
    assert Operation.objects.filter(kind="sample").count() == 0


def test_a_token_past_the_vocabulary_and_a_schema_that_cannot_compile_say_why(alice, world):
    err = error_of(
        v1(
            alice,
            "completions",
            {"model": world["model"], "prompt": "a", "logit_bias": {"99999": 3}},
        ),
        400,
        "logit_bias",
    )
    assert "99999" in err["message"] and "vocabulary" in err["message"]
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}
    err = error_of(
        v1(
            alice,
            "chat/completions",
            {"model": world["model"], "messages": HI, "response_format": bad, "stream": True},
        ),
        400,
        "response_format",
    )
    assert "objekt" in err["message"]


def test_the_tinker_wire_takes_the_controls_and_refuses_what_cannot_compile(
    alice, runtime, world
) -> None:
    eph = result(
        alice,
        runtime,
        alice.post(
            "save_weights_for_sampler",
            {"model_id": world["model"], "seq_id": 2, "sampling_session_seq_id": 0},
        ).json(),
    )
    sampler = eph["sampling_session_id"]

    def asample(seq: int, params: dict):
        return alice.post(
            "asample",
            {
                "sampling_session_id": sampler,
                "seq_id": seq,
                "num_samples": 3,
                "prompt": {"chunks": [{"tokens": [1, 2]}]},
                "sampling_params": params,
            },
        )

    params = {
        "max_tokens": 40,
        "seed": 1,
        "regex": "[0-9]{2,4}",
        "min_p": 0.01,
        "frequency_penalty": 1.0,
        "logprobs_of": "both",
    }
    out = result(alice, runtime, asample(0, params).json())
    for seq in out["sequences"]:
        text = bytes(t for t in seq["tokens"] if t < 256).decode()
        assert text.isdigit() and 2 <= len(text) <= 4
        assert len(seq["model_logprobs"]) == len(seq["logprobs"]) == len(seq["tokens"])
    r = asample(1, {"max_tokens": 4, "json_schema": {"type": "objekt"}})
    assert r.status_code == 400 and r.json()["field"] == "sampling_params.json_schema"
    assert "objekt" in r.json()["detail"]
    r = asample(1, {"max_tokens": 4, "regex": "(a"})
    assert r.status_code == 400 and r.json()["field"] == "sampling_params.regex"
    r = asample(1, {"max_tokens": 4, "logit_bias": {"4000": -100}})
    assert r.status_code == 400 and r.json()["field"] == "sampling_params.logit_bias"
    r = asample(1, {"max_tokens": 4, "min_p": 2})
    assert r.status_code == 400 and r.json()["field"] == "sampling_params.min_p"
