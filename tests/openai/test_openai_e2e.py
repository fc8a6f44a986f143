"""The official ``openai`` client against a running Loopwright (PostgreSQL, Redis, gunicorn and a
Celery worker on the tiny model): chat and text completions on a training model, a checkpoint
path and a registry version ARN, with n, stop, logprobs, streaming, errors and metering."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import numpy as np
import openai
import pytest
from openai import OpenAI

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput
from tests.e2e.stack import TINY, Stack

pytestmark = pytest.mark.e2e

CHAT = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "1+1?"},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "2+2?"},
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("openai")).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def trained(stack) -> dict:
    """alice's open session: a model trained two steps, its sampler weights and their version."""
    svc = ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    )
    with svc:
        tc = svc.create_lora_training_client(TINY, rank=4, seed=0)
        tokens = list(b"2+2=4\n")
        datum = Datum(
            model_input=ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
        )
        for _ in range(2):
            tc.forward_backward([datum], loss_fn="cross_entropy")
            tc.optim_step(AdamParams(learning_rate=1e-2)).result()
        path = tc.save_weights_for_sampler("oai").result().path
        version = api(
            stack, "alice", f"registry/model-packages/by-path?path={quote(path, safe='')}"
        )
        yield {
            "session": tc.session_id,
            "model": tc.model_id,
            "path": path,
            "arn": version["model_package_arn"],
            "tokenizer": tc.get_tokenizer(),
            "sampler": svc.create_sampling_client(model_path=path),
        }


def api(stack, who: str, path: str) -> dict:
    r = httpx.get(f"{stack.url}/api/v1/{path}", headers={"X-API-Key": stack.keys[who]}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def client(stack, who: str = "alice") -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys[who], max_retries=0, timeout=120)


def metered(stack, session: str) -> dict[str, int]:
    lines = api(stack, "alice", f"sessions/{session}/usage")["lines"]
    out: dict[str, int] = {}
    for line in lines:
        out[line["meter"]] = out.get(line["meter"], 0) + line["quantity"]
    return out


def test_chat_multi_turn_on_a_training_model_is_metered_as_reported(stack, trained) -> None:
    before = metered(stack, trained["session"])
    r = client(stack).chat.completions.create(
        model=trained["model"], messages=CHAT, max_tokens=8, seed=1
    )
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == trained["model"]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    rendered = trained["tokenizer"].apply_chat_template(
        CHAT, add_generation_prompt=True, tokenize=False
    )
    assert r.usage.prompt_tokens == len(
        trained["tokenizer"].encode(rendered, add_special_tokens=False)
    )
    after = metered(stack, trained["session"])
    assert after["prefill_tokens"] - before.get("prefill_tokens", 0) == r.usage.prompt_tokens
    assert after["sampled_tokens"] - before.get("sampled_tokens", 0) == r.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_a_retried_request_with_an_idempotency_key_is_answered_and_metered_once(
    stack, trained
) -> None:
    before = metered(stack, trained["session"])
    ask = dict(model=trained["model"], messages=CHAT, max_tokens=6, temperature=1.0)
    key = {"Idempotency-Key": f"e2e-{trained['session']}"}
    first = client(stack).chat.completions.create(**ask, extra_headers=key)
    again = client(stack).chat.completions.create(**ask, extra_headers=key)
    assert again.id == first.id
    assert again.choices[0].message.content == first.choices[0].message.content
    after = metered(stack, trained["session"])
    assert (
        after["sampled_tokens"] - before.get("sampled_tokens", 0) == first.usage.completion_tokens
    )
    with pytest.raises(openai.ConflictError):
        client(stack).chat.completions.create(**{**ask, "max_tokens": 5}, extra_headers=key)


def test_completion_with_n_samples_on_a_checkpoint_path(stack, trained) -> None:
    r = client(stack).completions.create(
        model=trained["path"], prompt="2+2=", max_tokens=6, n=3, seed=7, temperature=1.0
    )
    assert r.object == "text_completion" and [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.text for c in r.choices}) > 1  # three draws, not one repeated
    assert r.usage.prompt_tokens == 4
    assert r.usage.completion_tokens <= 18


def test_a_registry_version_arn_is_a_model(stack, trained) -> None:
    by_arn = client(stack).completions.create(
        model=trained["arn"], prompt="2+2=", max_tokens=6, seed=11
    )
    by_path = client(stack).completions.create(
        model=trained["path"], prompt="2+2=", max_tokens=6, seed=11
    )
    assert by_arn.choices[0].text == by_path.choices[0].text  # the same weights, the same seed


def test_stop_sequences_cut_the_text(stack, trained) -> None:
    oai = client(stack)
    kw = {"model": trained["model"], "prompt": "hello", "max_tokens": 16, "seed": 5}
    free = oai.completions.create(**kw, stop=None).choices[0]
    assert free.finish_reason == "length" and len(free.text) >= 6, free
    stop = free.text[3:5]
    cut = oai.completions.create(**kw, stop=[stop, "never-seen-here"]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.index(stop)]


def token_id(tok, t) -> int:
    """The id of a reported token: a special token by its text, else its one byte (the tiny
    vocabulary is byte-level without merges)."""
    if t.token in tok.all_special_tokens:
        return tok.convert_tokens_to_ids(t.token)
    (byte,) = t.bytes
    return byte


def test_logprobs_and_top_logprobs_match_the_sampler(stack, trained) -> None:
    r = client(stack).chat.completions.create(
        model=trained["path"],
        messages=CHAT,
        max_tokens=6,
        seed=3,
        logprobs=True,
        top_logprobs=3,
    )
    content = r.choices[0].logprobs.content
    assert content and all(len(t.top_logprobs) == 3 for t in content)
    for t in content:
        tops = [x.logprob for x in t.top_logprobs]
        assert tops == sorted(tops, reverse=True) and t.logprob <= tops[0] + 1e-6
    tok = trained["tokenizer"]
    generated = [token_id(tok, t) for t in content]
    assert tok.decode(generated, skip_special_tokens=True) == r.choices[0].message.content
    # an independent computation: the same weights score prompt + completion (Tinker path)
    prompt = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    scored = trained["sampler"].compute_logprobs(ModelInput.from_ints(prompt_ids + generated))
    expected = scored.result()[len(prompt_ids) :]
    np.testing.assert_allclose([t.logprob for t in content], expected, atol=2e-3)


def test_chat_stream_equals_the_answer(stack, trained) -> None:
    kw = {"model": trained["model"], "messages": CHAT, "max_tokens": 8, "seed": 21, "n": 2}
    whole = client(stack).chat.completions.create(**kw)
    chunks = list(
        client(stack).chat.completions.create(
            **kw, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text, finish = ["", ""], [None, None]
    for chunk in chunks[:-1]:
        for c in chunk.choices:
            text[c.index] += c.delta.content or ""
            finish[c.index] = c.finish_reason or finish[c.index]
    assert text == [c.message.content for c in whole.choices]
    assert finish == [c.finish_reason for c in whole.choices]
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_completion_stream_with_logprobs(stack, trained) -> None:
    kw = {"model": trained["path"], "prompt": "2+2=", "max_tokens": 6, "seed": 9, "logprobs": 2}
    whole = client(stack).completions.create(**kw).choices[0]
    streamed = list(client(stack).completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == whole.text
    tokens = [t for c in streamed if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert tokens == whole.logprobs.tokens
    assert streamed[-1].choices[0].finish_reason == whole.finish_reason


def test_models_lists_the_callers_names_only(stack, trained) -> None:
    mine = {m.id for m in client(stack).models.list()}
    assert {trained["model"], trained["path"], trained["arn"], trained["session"]} <= mine
    assert trained["sampler"].sampling_session_id in mine
    theirs = {m.id for m in client(stack, "charlie").models.list()}
    assert not theirs & mine
    for name in (trained["path"], trained["arn"], trained["model"]):
        assert client(stack).models.retrieve(name).id == name
    with pytest.raises(openai.NotFoundError):
        client(stack, "charlie").models.retrieve(trained["path"])


def test_errors_in_openais_shape(stack, trained) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client(stack).chat.completions.create(model="gpt-4o", messages=CHAT)
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    for name in (trained["model"], trained["path"], trained["arn"], trained["session"]):
        with pytest.raises(openai.NotFoundError):  # another tenant's model: not found
            client(stack, "charlie").chat.completions.create(model=name, messages=CHAT)
    bare = httpx.post(f"{stack.url}/v1/chat/completions", json={"model": "x", "messages": CHAT})
    assert bare.status_code == 401 and bare.json()["error"]["type"] == "invalid_request_error"
    wrong = OpenAI(base_url=f"{stack.url}/v1", api_key="tml-not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    with pytest.raises(openai.BadRequestError) as bad:
        client(stack).chat.completions.create(model=trained["model"], messages=CHAT, temperature=5)
    assert bad.value.param == "temperature"
