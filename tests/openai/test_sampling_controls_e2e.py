"""The official ``openai`` client drives the sampling controls against a running Loopwright
(PostgreSQL, Redis, gunicorn and a Celery worker on the tiny model): processors with logprobs,
``response_format`` through ``chat.completions.parse`` and as a stream, seeds that reproduce
while another account's requests run beside them, and refusals as ``BadRequestError``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

from loopwright import ServiceClient
from tests.e2e.stack import TINY, Stack

pytestmark = pytest.mark.e2e

CHAT = [{"role": "user", "content": "Describe a person as JSON."}]


class Person(BaseModel):
    name: str = Field(max_length=6)
    age: int = Field(ge=0, le=120)
    tall: bool


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("controls")).start()
    try:
        yield running
    finally:
        running.stop()


def live_model(stack, who: str) -> str:
    svc = ServiceClient(base_url=stack.url, api_key=stack.keys[who], role_arn=stack.roles[who])
    return svc.create_lora_training_client(TINY, rank=4, seed=0).model_id


@pytest.fixture(scope="module")
def models(stack) -> dict[str, str]:
    return {who: live_model(stack, who) for who in ("alice", "charlie")}


def client(stack, who: str = "alice") -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys[who], max_retries=0, timeout=120)


CONTROLS = {
    "presence_penalty": 0.5,
    "frequency_penalty": 0.8,
    "logit_bias": {"120": 100, "121": 100, "122": 100, "258": 100},  # x, y, z or the end
    "extra_body": {"min_p": 0.05, "repetition_penalty": 1.2},
}


def test_processors_with_logprobs(stack, models) -> None:
    r = client(stack).chat.completions.create(
        model=models["alice"],
        messages=CHAT,
        max_tokens=10,
        n=2,
        seed=3,
        logprobs=True,
        top_logprobs=2,
        **CONTROLS,
    )
    for choice in r.choices:
        assert set(choice.message.content) <= set("xyz")
        assert len(choice.logprobs.content) == len(choice.message.content)
        assert all(len(t.top_logprobs) <= 2 and t.logprob <= 0 for t in choice.logprobs.content)


def test_parse_gives_answers_of_the_schema_over_many_seeds(stack, models) -> None:
    schema = Person.model_json_schema()
    for seed in range(8):
        r = client(stack).chat.completions.parse(
            model=models["alice"],
            messages=CHAT,
            response_format=Person,
            seed=seed,
            n=2,
            temperature=1.2,
        )
        for choice in r.choices:
            assert choice.finish_reason == "stop"
            assert isinstance(choice.message.parsed, Person)
            jsonschema.validate(json.loads(choice.message.content), schema)


def test_a_streamed_json_object_is_the_json_alone(stack, models) -> None:
    kw = {
        "model": models["alice"],
        "messages": CHAT,
        "seed": 5,
        "max_tokens": 200,
        "temperature": 0.2,
        "response_format": {"type": "json_object"},
    }
    whole = client(stack).chat.completions.create(**kw).choices[0]
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client(stack).chat.completions.create(**kw, stream=True)
        if c.choices
    )
    assert text == whole.message.content
    if whole.finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_a_seed_draws_the_same_beside_another_accounts_requests(stack, models) -> None:
    ask = dict(
        model=models["alice"],
        messages=CHAT,
        max_tokens=12,
        n=3,
        seed=42,
        temperature=1.1,
        **CONTROLS,
    )
    alone = client(stack).chat.completions.create(**ask)
    noise = dict(
        model=models["charlie"],
        messages=CHAT,
        max_tokens=12,
        n=4,
        temperature=1.0,
        extra_body={"repetition_penalty": 1.5},
    )
    with ThreadPoolExecutor(6) as pool:
        theirs = [
            pool.submit(client(stack, "charlie").chat.completions.create, **noise) for _ in range(4)
        ]
        packed = [pool.submit(client(stack).chat.completions.create, **ask) for _ in range(2)]
        for f in theirs:
            f.result()
        results = [f.result() for f in packed]
    for r in results:
        assert [c.message.content for c in r.choices] == [c.message.content for c in alone.choices]


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"logit_bias": {"100000": 1}}, "logit_bias"),
        ({"extra_body": {"min_p": 2}}, "min_p"),
        ({"extra_body": {"repetition_penalty": 0}}, "repetition_penalty"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "objekt"}},
                }
            },
            "response_format",
        ),
    ],
)
def test_refusals_are_bad_requests_naming_the_param(stack, models, kw, param) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client(stack).chat.completions.create(model=models["alice"], messages=CHAT, **kw)
    assert bad.value.status_code == 400 and bad.value.param == param
