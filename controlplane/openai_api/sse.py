"""Streaming answers as server-sent events: one chunk per generated token, in OpenAI's
``chat.completion.chunk`` and ``text_completion`` layouts, a final chunk per choice with its
finish reason, the usage chunk when asked for, then ``data: [DONE]``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from .responses import chat_logprobs, completion_logprobs, usage
from .services import Completed

DONE = b"data: [DONE]\n\n"


def event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def event_stream(chunks: Iterable[dict]) -> Iterator[bytes]:
    for chunk in chunks:
        yield event(chunk)
    yield DONE


def chat_chunks(done: Completed, *, logprobs: bool, include_usage: bool) -> Iterator[dict]:
    head = {
        "id": done.id,
        "object": "chat.completion.chunk",
        "created": done.created,
        "model": done.model,
    }
    tail = {"usage": None} if include_usage else {}

    def chunk(index: int, delta: dict, lp: dict | None = None, finish: str | None = None) -> dict:
        choice = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}
        return {**head, "choices": [choice], **tail}

    for i, choice in enumerate(done.choices):
        yield chunk(i, {"role": "assistant", "content": ""})
        for piece in choice.pieces:
            lp = chat_logprobs(done.tokenizer, [piece]) if logprobs else None
            if piece.delta or lp is not None:
                yield chunk(i, {"content": piece.delta}, lp)
        yield chunk(i, {}, None, choice.finish_reason)
    if include_usage:
        yield {**head, "choices": [], "usage": usage(done)}


def completion_chunks(done: Completed, *, logprobs: bool, include_usage: bool) -> Iterator[dict]:
    head = {
        "id": done.id,
        "object": "text_completion",
        "created": done.created,
        "model": done.model,
    }
    tail = {"usage": None} if include_usage else {}

    def chunk(index: int, text: str, lp: dict | None = None, finish: str | None = None) -> dict:
        choice = {"index": index, "text": text, "logprobs": lp, "finish_reason": finish}
        return {**head, "choices": [choice], **tail}

    for i, choice in enumerate(done.choices):
        for piece in choice.pieces:
            lp = completion_logprobs(done.tokenizer, [piece]) if logprobs else None
            if piece.delta or lp is not None:
                yield chunk(i, piece.delta, lp)
        yield chunk(i, "", None, choice.finish_reason)
    if include_usage:
        yield {**head, "choices": [], "usage": usage(done)}
