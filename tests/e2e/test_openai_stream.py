"""Token streaming of ``/v1`` against a running Loopwright (PostgreSQL, Redis, gunicorn and a
worker process on the tiny model), with the official ``openai`` client: tokens arrive while the
operation still runs, and the stream equals the answer to the same request unstreamed (chat and
completions, n=2, stop sequences, logprobs, usage); a client that goes away leaves its request
to finish and be metered once; another tenant's model is not found."""

from __future__ import annotations

import time

import httpx
import openai
import psycopg
import pytest
from openai import OpenAI

from loopwright import ServiceClient

from .stack import TINY, Stack

pytestmark = pytest.mark.e2e

CHAT = [{"role": "user", "content": "Count with me: 1, 2, 3"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("openai-stream")).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def model(stack):
    """alice's training model (a LoRA on the tiny model), served as ``model-…``."""
    svc = ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    )
    with svc:  # the session stays open while the module's tests run
        yield svc.create_lora_training_client(TINY, rank=4, seed=0).model_id


def client(stack, who: str = "alice") -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys[who], max_retries=0, timeout=120)


def operation_row(stack, request_id: str) -> tuple:
    """The operation's status and when it finished (seconds since the epoch, or None)."""
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        return conn.execute(
            "SELECT status, extract(epoch FROM finished_at) FROM training_sessions_operation "
            "WHERE id = %s",
            [request_id],
        ).fetchone()


def long_seed(stack, model: str, max_tokens: int) -> int:
    """A seed whose completion runs to ``max_tokens`` (no end-of-sequence drawn before)."""
    for seed in range(40):
        r = client(stack).chat.completions.create(
            model=model, messages=CHAT, max_tokens=max_tokens, seed=seed
        )
        if r.choices[0].finish_reason == "length":
            return seed
    pytest.fail("no seed ran to max_tokens")


def test_tokens_arrive_while_the_operation_runs(stack, model) -> None:
    kw = {"model": model, "messages": CHAT, "max_tokens": 100}
    kw["seed"] = long_seed(stack, model, 100)
    arrivals, text, request_id = [], "", None
    for chunk in client(stack).chat.completions.create(**kw, stream=True):
        request_id = chunk.id.removeprefix("chatcmpl-")
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.time())  # the machine's clock, as the database's
            text += chunk.choices[0].delta.content
    status, finished_at = operation_row(stack, request_id)
    assert status == "done"
    early = [t for t in arrivals if t < float(finished_at)]
    # tokens came while the worker still drew them: many chunks before the operation finished
    assert len(early) >= 5, (len(early), len(arrivals))
    assert text == client(stack).chat.completions.create(**kw).choices[0].message.content


def chat_streamed(stack, **kw) -> tuple[list[str], list[str | None], object]:
    text, finish, usage = ["", ""], [None, None], None
    for chunk in client(stack).chat.completions.create(
        **kw, stream=True, stream_options={"include_usage": True}
    ):
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
        for c in chunk.choices:
            text[c.index] += c.delta.content or ""
            finish[c.index] = c.finish_reason or finish[c.index]
    return text, finish, usage


def test_chat_stream_with_n_2_equals_the_answer(stack, model) -> None:
    kw = {"model": model, "messages": CHAT, "max_tokens": 24, "seed": 21, "n": 2}
    whole = client(stack).chat.completions.create(**kw)
    text, finish, usage = chat_streamed(stack, **kw)
    assert text == [c.message.content for c in whole.choices]
    assert finish == [c.finish_reason for c in whole.choices]
    assert usage == whole.usage


def test_chat_stream_with_a_stop_string_sends_nothing_past_it(stack, model) -> None:
    kw = {"model": model, "messages": CHAT, "max_tokens": 24, "seed": 4, "n": 2}
    free = client(stack).chat.completions.create(**kw).choices[0].message.content
    assert len(free) >= 4, free
    stop = free[len(free) // 2 : len(free) // 2 + 2]
    whole = client(stack).chat.completions.create(**kw, stop=[stop])
    assert whole.choices[0].message.content == free[: free.index(stop)]
    text, finish, _ = chat_streamed(stack, **kw, stop=[stop])
    assert text == [c.message.content for c in whole.choices]
    assert finish == [c.finish_reason for c in whole.choices] and finish[0] == "stop"


def test_completion_stream_with_n_2_stop_and_logprobs_equals_the_answer(stack, model) -> None:
    kw = {"model": model, "prompt": "1, 2, 3", "max_tokens": 24, "seed": 9, "n": 2}
    free = client(stack).completions.create(**kw).choices[1].text
    assert len(free) >= 4, free
    kw |= {"stop": [free[len(free) // 2 : len(free) // 2 + 2]], "logprobs": 2}
    whole = client(stack).completions.create(**kw)
    text, tokens, offsets, finish = ["", ""], [[], []], [[], []], [None, None]
    for chunk in client(stack).completions.create(**kw, stream=True):
        assert chunk.object == "text_completion"
        for c in chunk.choices:
            text[c.index] += c.text
            finish[c.index] = c.finish_reason or finish[c.index]
            if c.logprobs:
                tokens[c.index] += c.logprobs.tokens
                offsets[c.index] += c.logprobs.text_offset
    assert text == [c.text for c in whole.choices]
    assert tokens == [c.logprobs.tokens for c in whole.choices]
    assert offsets == [c.logprobs.text_offset for c in whole.choices]
    assert finish == [c.finish_reason for c in whole.choices] and finish[1] == "stop"


def test_a_client_that_goes_away_leaves_the_request_to_finish(stack, model) -> None:
    body = {"model": model, "messages": CHAT, "max_tokens": 100, "seed": 3, "stream": True}
    headers = {"Authorization": f"Bearer {stack.keys['alice']}"}
    with httpx.stream(
        "POST", f"{stack.url}/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as r:
        first = next(line for line in r.iter_lines() if line.startswith("data: {"))
    request_id = first.split('"id":"chatcmpl-', 1)[1].split('"', 1)[0]
    deadline = time.monotonic() + 120
    while operation_row(stack, request_id)[0] != "done" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert operation_row(stack, request_id)[0] == "done"
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        metered = dict(
            conn.execute(
                "SELECT meter, quantity FROM metering_usagerecord WHERE operation_id = %s",
                [request_id],
            ).fetchall()
        )
        (result,) = conn.execute(
            "SELECT result FROM training_sessions_operation WHERE id = %s", [request_id]
        ).fetchone()
    assert metered["sampled_tokens"] == len(result["sequences"][0]["tokens"])  # as any request
    # and the server still answers
    assert client(stack).chat.completions.create(model=model, messages=CHAT, max_tokens=2).choices


def test_another_tenant_streaming_alices_model_gets_404(stack, model) -> None:
    with pytest.raises(openai.NotFoundError):
        client(stack, "charlie").chat.completions.create(
            model=model, messages=CHAT, max_tokens=4, stream=True
        )
    with pytest.raises(openai.NotFoundError):
        client(stack, "charlie").completions.create(
            model=model, prompt="1", max_tokens=4, stream=True
        )
