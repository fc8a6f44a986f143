"""Answer layouts, checked against the official client's own types: chat.completion,
text_completion, their stream chunks, and the server-sent event framing."""

from __future__ import annotations

import json

import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from controlplane.completions.rendering import choice_of
from controlplane.completions.services import Completed
from controlplane.openai_api import responses, sse
from workers.engine.tiny_model import build_tiny_tokenizer

EOS = 258


@pytest.fixture(scope="module")
def done() -> Completed:
    tok = build_tiny_tokenizer()
    first = {
        "tokens": [*b"hi!", EOS],
        "logprobs": [-0.1, -0.2, -0.3, -0.4],
        "stop_reason": "stop",
        "topk_logprobs": [[[104, -0.1], [72, -2.5]], [[105, -0.2]], [[33, -0.3]], [[EOS, -0.4]]],
    }
    second = {
        "tokens": [*b"yo"],
        "logprobs": [-1.0, -1.5],
        "stop_reason": "length",
        "topk_logprobs": [[[121, -1.0]], [[111, -1.5]]],
    }
    choices = [choice_of(tok, s, [], EOS) for s in (first, second)]
    return Completed("chatcmpl-req-1", 1700000000, "sampler-x", choices, 7, 6, tok)


def test_chat_completion_layout(done) -> None:
    body = responses.chat_completion(done, logprobs=True)
    parsed = ChatCompletion.model_validate(body)
    assert [c.message.content for c in parsed.choices] == ["hi!", "yo"]
    assert [c.finish_reason for c in parsed.choices] == ["stop", "length"]
    first = parsed.choices[0].logprobs.content
    assert [t.token for t in first] == ["h", "i", "!"]  # the end of sequence is not text
    assert first[0].top_logprobs[1].token == "H" and first[0].top_logprobs[1].logprob == -2.5
    assert first[0].bytes == [104]
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 6, "total_tokens": 13}
    assert responses.chat_completion(done, logprobs=False)["choices"][0]["logprobs"] is None


def test_text_completion_layout(done) -> None:
    body = responses.text_completion(done, logprobs=True)
    parsed = Completion.model_validate(body)
    lp = parsed.choices[0].logprobs
    assert lp.tokens == ["h", "i", "!"] and lp.text_offset == [0, 1, 2]
    assert lp.token_logprobs == [-0.1, -0.2, -0.3]
    assert lp.top_logprobs[0] == {"h": -0.1, "H": -2.5}
    assert parsed.usage.total_tokens == 13


def frames(stream) -> list:
    raw = b"".join(stream).decode()
    assert raw.endswith("\n\n") and "\n\n\n" not in raw
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    assert all(e != "[DONE]" for e in events[:-1]) and events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_chat_stream_rebuilds_the_completion(done) -> None:
    chunks = frames(sse.event_stream(sse.chat_chunks(done, logprobs=True, include_usage=True)))
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert all(c.object == "chat.completion.chunk" and c.id == done.id for c in parsed)
    text = {0: "", 1: ""}
    finish = {}
    for c in parsed[:-1]:
        (choice,) = c.choices
        text[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finish[choice.index] = choice.finish_reason
        assert c.usage is None and "usage" in chunks[0]
    assert text == {0: "hi!", 1: "yo"} and finish == {0: "stop", 1: "length"}
    assert parsed[0].choices[0].delta.role == "assistant"
    token_chunks = [c for c in parsed if c.choices and c.choices[0].logprobs]
    assert [c.choices[0].logprobs.content[0].token for c in token_chunks] == [*"hi!yo"]
    assert parsed[-1].choices == [] and parsed[-1].usage.completion_tokens == 6


def test_chat_stream_without_usage_has_no_usage_key(done) -> None:
    chunks = frames(sse.event_stream(sse.chat_chunks(done, logprobs=False, include_usage=False)))
    assert all("usage" not in c and c["choices"] for c in chunks)
    assert all(c["choices"][0]["logprobs"] is None for c in chunks)


def completion_chunk(chunk: dict) -> Completion:
    """A streamed completion chunk; its ``finish_reason`` is null until the last one, as
    OpenAI sends it (the client reads stream chunks without validating that field)."""
    assert all(set(c) == {"index", "text", "logprobs", "finish_reason"} for c in chunk["choices"])
    choices = [{**c, "finish_reason": c["finish_reason"] or "length"} for c in chunk["choices"]]
    return Completion.model_validate({**chunk, "choices": choices})


def test_completion_stream_rebuilds_the_completion(done) -> None:
    chunks = frames(
        sse.event_stream(sse.completion_chunks(done, logprobs=True, include_usage=True))
    )
    parsed = [completion_chunk(c) for c in chunks]
    assert all(c.object == "text_completion" for c in parsed)
    text = {0: "", 1: ""}
    for c in parsed[:-1]:
        text[c.choices[0].index] += c.choices[0].text
    assert text == {0: "hi!", 1: "yo"}
    offsets = [c.choices[0].logprobs.text_offset[0] for c in parsed[:-1] if c.choices[0].logprobs]
    assert offsets == [0, 1, 2, 0, 1]
    assert parsed[-1].choices == [] and parsed[-1].usage.prompt_tokens == 7
