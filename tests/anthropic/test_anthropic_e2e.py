"""The official ``anthropic`` client against a running Loopwright (PostgreSQL, Redis, gunicorn
and a Celery worker on the tiny model): messages on a training model, a checkpoint path and a
registry version ARN; the bill against ``/v1``'s for the same conversation; count_tokens; stop
sequences; a stream as the tokens are drawn; every refusal in Anthropic's shape, another
tenant's names and hostile bodies."""

from __future__ import annotations

import json
from urllib.parse import quote

import anthropic
import httpx
import pytest
from anthropic import Anthropic
from openai import OpenAI

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput
from tests.e2e.stack import TINY, Stack

pytestmark = pytest.mark.e2e

SYSTEM = "You add numbers."
# the current client no longer has temperature, top_p or top_k among its arguments (older ones
# do): they travel in the body all the same
GREEDY = {"temperature": 0}
CHAT = [
    {"role": "user", "content": "1+1?"},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "2+2?"},
]


_clients: dict[tuple[str, str], Anthropic] = {}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("anthropic")).start()
    try:
        yield running
    finally:
        for made in _clients.values():
            made.close()
        _clients.clear()
        running.stop()


def api(stack, who: str, path: str) -> dict:
    r = httpx.get(f"{stack.url}/api/v1/{path}", headers={"X-API-Key": stack.keys[who]}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


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
        path = tc.save_weights_for_sampler("claude").result().path
        version = api(
            stack, "alice", f"registry/model-packages/by-path?path={quote(path, safe='')}"
        )
        yield {
            "session": tc.session_id,
            "model": tc.model_id,
            "path": path,
            "arn": version["model_package_arn"],
            "tokenizer": tc.get_tokenizer(),
        }


def client(stack, who: str = "alice") -> Anthropic:
    """``who``'s client; the base URL is the service's own (the client adds /v1/messages)."""
    if (stack.url, who) not in _clients:
        _clients[stack.url, who] = Anthropic(
            base_url=stack.url, api_key=stack.keys[who], max_retries=0, timeout=120
        )
    return _clients[stack.url, who]


def metered(stack, session: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in api(stack, "alice", f"sessions/{session}/usage")["lines"]:
        out[line["meter"]] = out.get(line["meter"], 0) + line["quantity"]
    return out


def billed(stack, session: str, ask) -> tuple[object, dict[str, int]]:
    """``ask()``'s answer and what it added to the session's bill, meter by meter."""
    before = metered(stack, session)
    answer = ask()
    after = metered(stack, session)
    return answer, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_a_message_is_billed_exactly_as_v1_bills_the_same_conversation(stack, trained) -> None:
    model, session = trained["model"], trained["session"]
    msg, bill = billed(
        stack,
        session,
        lambda: client(stack).messages.create(
            model=model, system=SYSTEM, messages=CHAT, max_tokens=8, extra_body=GREEDY
        ),
    )
    assert msg.type == "message" and msg.role == "assistant" and msg.model == model
    assert msg.id.startswith("msg_") and msg._request_id
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.content[0].type == "text"
    # input tokens: the chat template's count of the conversation, billed as prefill
    rendered = trained["tokenizer"].apply_chat_template(
        [{"role": "system", "content": SYSTEM}, *CHAT], add_generation_prompt=True, tokenize=False
    )
    assert msg.usage.input_tokens == len(
        trained["tokenizer"].encode(rendered, add_special_tokens=False)
    )
    assert bill == {
        "prefill_tokens": msg.usage.input_tokens,
        "sampled_tokens": msg.usage.output_tokens,
    }
    counted = client(stack).messages.count_tokens(model=model, system=SYSTEM, messages=CHAT)
    assert counted.input_tokens == msg.usage.input_tokens
    with OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys["alice"], max_retries=0) as oai:
        chat, v1_bill = billed(
            stack,
            session,
            lambda: oai.chat.completions.create(
                model=model,
                messages=[{"role": "system", "content": SYSTEM}, *CHAT],
                max_tokens=8,
                temperature=0,
            ),
        )
    assert chat.usage.prompt_tokens == msg.usage.input_tokens
    assert chat.usage.completion_tokens == msg.usage.output_tokens
    assert chat.choices[0].message.content == msg.content[0].text  # greedy: the same tokens
    assert v1_bill == bill


def test_every_model_name_serves_and_count_tokens_costs_nothing(stack, trained) -> None:
    texts = set()
    for name in (trained["path"], trained["arn"], trained["session"]):
        msg = client(stack).messages.create(
            model=name,
            messages=[{"role": "user", "content": "2+2="}],
            max_tokens=6,
            extra_body=GREEDY,
        )
        texts.add(msg.content[0].text)
    assert (
        len(texts) == 1
    )  # the checkpoint by both names, and the sampler now newest in the session
    _, bill = billed(
        stack,
        trained["session"],
        lambda: client(stack).messages.count_tokens(
            model=trained["path"], messages=[{"role": "user", "content": "2+2="}]
        ),
    )
    assert bill == {}


def test_stop_sequences_end_the_text_and_are_echoed(stack, trained) -> None:
    kw = {"model": trained["model"], "max_tokens": 16, "extra_body": GREEDY}
    kw["messages"] = [{"role": "user", "content": "hello"}]
    free = client(stack).messages.create(**kw)
    text = free.content[0].text
    assert free.stop_reason == "max_tokens" and len(text) >= 6, free
    stop = text[3:5]
    cut = client(stack).messages.create(**kw, stop_sequences=[stop, "never-seen-here"])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.index(stop)]
    with client(stack).messages.stream(**kw, stop_sequences=[stop]) as streamed:
        joined = "".join(streamed.text_stream)
        final = streamed.get_final_message()
    assert joined == cut.content[0].text == final.content[0].text
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


def test_a_stream_is_the_answer_sent_as_the_tokens_are_drawn(stack, trained) -> None:
    kw = {"model": trained["path"], "max_tokens": 24, "extra_body": GREEDY, "system": SYSTEM}
    kw["messages"] = CHAT
    whole = client(stack).messages.create(**kw)
    events = list(client(stack).messages.create(**kw, stream=True))
    kinds = [e.type for e in events]
    deltas = kinds.count("content_block_delta")
    assert kinds == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0].message.usage.input_tokens == whole.usage.input_tokens
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == (
        whole.content[0].text
    )
    assert events[-2].delta.stop_reason == whole.stop_reason
    assert events[-2].usage.output_tokens == whole.usage.output_tokens
    if whole.usage.output_tokens > 4:
        assert deltas > 1  # sent in pieces as the worker drew them, not the answer at once
    with client(stack).messages.stream(**kw) as streamed:
        final = streamed.get_final_message()
    assert final.content[0].text == whole.content[0].text and final.usage == whole.usage


def test_errors_in_anthropics_shape(stack, trained) -> None:
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client(stack).messages.create(model="claude-sonnet-4-5", messages=hi, max_tokens=4)
    assert missing.value.body["error"]["type"] == "not_found_error"
    for name in (trained["model"], trained["path"], trained["arn"], trained["session"]):
        with pytest.raises(anthropic.NotFoundError) as theirs:  # another tenant's: not found
            client(stack, "charlie").messages.create(model=name, messages=hi, max_tokens=4)
        said = theirs.value.body["error"]["message"].replace(name, "X")
        assert said == missing.value.body["error"]["message"].replace("claude-sonnet-4-5", "X")
        with pytest.raises(anthropic.NotFoundError):
            client(stack, "charlie").messages.count_tokens(model=name, messages=hi)
    wrong = Anthropic(base_url=stack.url, api_key="tml-not-a-key", max_retries=0)
    with wrong, pytest.raises(anthropic.AuthenticationError) as bad_key:
        wrong.messages.create(model=trained["model"], messages=hi, max_tokens=4)
    assert bad_key.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError) as unsupported:
        client(stack).messages.create(
            model=trained["model"],
            messages=hi,
            max_tokens=4,
            tools=[{"name": "f", "input_schema": {"type": "object"}}],
        )
    assert unsupported.value.body["error"]["message"].startswith("tools:")
    url, key = f"{stack.url}/v1/messages", {"x-api-key": stack.keys["alice"]}
    no_max = httpx.post(url, headers=key, json={"model": trained["model"], "messages": hi})
    assert no_max.status_code == 400
    assert no_max.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }


def test_hostile_bodies_are_4xx_never_5xx(stack, trained) -> None:
    url, key = f"{stack.url}/v1/messages", {"x-api-key": stack.keys["alice"]}
    deep: object = {"type": "text", "text": "x"}
    for _ in range(500):
        deep = [deep]
    model = trained["model"]
    raws = [
        b'{"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "\xc3\x28"}]}',
        json.dumps(
            {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": deep}]}
        ),
        json.dumps(
            {"model": model, "max_tokens": 2**62, "messages": [{"role": "user", "content": "x"}]}
        ),
        json.dumps(
            {"model": model, "max_tokens": 10**30, "messages": [{"role": "user", "content": "x"}]}
        ),
        json.dumps(
            {"model": model, "max_tokens": 100_000, "messages": [{"role": "user", "content": "x"}]}
        ),
        json.dumps(
            {
                "model": model,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}] * 20_000}],
            }
        ),
    ]
    for raw in raws:
        r = httpx.post(
            url, headers={**key, "content-type": "application/json"}, content=raw, timeout=60
        )
        assert 400 <= r.status_code < 500, (raw[:60], r.status_code, r.text[:300])
        assert r.json()["type"] == "error", r.text[:300]
    with pytest.raises(anthropic.BadRequestError):
        client(stack).messages.create(
            model=model, messages=[{"role": "user", "content": "x"}], max_tokens=1_000_000
        )
