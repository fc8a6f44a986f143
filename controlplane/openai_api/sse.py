"""Streaming answers as server-sent events, in OpenAI's ``chat.completion.chunk`` and
``text_completion`` layouts: a chunk per piece of text (with its tokens' logprobs when asked
for), a final chunk per choice with its finish reason, the usage chunk when asked for, then
``data: [DONE]``. ``chunks_of`` writes the events of ``controlplane.completions.live`` (a
stream as its tokens arrive, or a finished answer replayed) as these chunks."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from controlplane.completions import live
from controlplane.completions.rendering import Piece
from controlplane.completions.services import Completed
from controlplane.edge.errors import openai_error_of

from .responses import chat_logprobs, completion_logprobs, usage

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it


def event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def event_stream(chunks: Iterable[dict | None]) -> Iterator[bytes]:
    """The events of ``chunks`` (None: nothing to send yet, a keep-alive comment), then DONE;
    a chunk holding ``error`` ends the stream without DONE, as OpenAI's does."""
    for chunk in chunks:
        if chunk is None:
            yield KEEPALIVE
            continue
        yield event(chunk)
        if "error" in chunk:
            return
    yield DONE


class Chunks:
    """The chunks of one answer (``chat``: chat.completion.chunk, else text_completion)."""

    def __init__(
        self,
        *,
        chat: bool,
        id: str,
        created: int,
        model: str,
        tokenizer: PreTrainedTokenizerBase,
        logprobs: bool,
        include_usage: bool,
    ) -> None:
        self.chat = chat
        self.head = {
            "id": id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        self.tail = {"usage": None} if include_usage else {}
        self.tokenizer = tokenizer
        self.logprobs = logprobs
        self.include_usage = include_usage

    def _choice(self, index: int, text: dict | str, lp: dict | None, finish: str | None) -> dict:
        key = "delta" if self.chat else "text"
        choice = {"index": index, key: text, "logprobs": lp, "finish_reason": finish}
        return {**self.head, "choices": [choice], **self.tail}

    def opening(self, index: int) -> dict | None:
        """A chat choice's first chunk (its role); completions have none."""
        return (
            self._choice(index, {"role": "assistant", "content": ""}, None, None)
            if self.chat
            else None
        )

    def text(self, index: int, text: str, pieces: list[Piece]) -> dict | None:
        """A chunk of ``text`` with ``pieces``' logprobs (None: nothing to send)."""
        lp = None
        if self.logprobs and pieces:
            lp = (chat_logprobs if self.chat else completion_logprobs)(self.tokenizer, pieces)
        if not text and lp is None:
            return None
        return self._choice(index, {"content": text} if self.chat else text, lp, None)

    def finish(self, index: int, reason: str) -> dict:
        return self._choice(index, {} if self.chat else "", None, reason)

    def usage(self, done: Completed) -> dict | None:
        return {**self.head, "choices": [], "usage": usage(done)} if self.include_usage else None


def chunks_of(
    events: Iterable[live.Event],
    *,
    chat: bool,
    model: str,
    tokenizer: PreTrainedTokenizerBase,
    logprobs: bool,
    include_usage: bool,
) -> Iterator[dict | None]:
    """The chunks of a stream's events (None: a keep-alive); a failure is a last chunk holding
    ``error`` in OpenAI's shape."""
    out: Chunks | None = None
    for e in events:
        if isinstance(e, live.Started):
            out = Chunks(
                chat=chat,
                id=e.id,
                created=e.created,
                model=model,
                tokenizer=tokenizer,
                logprobs=logprobs,
                include_usage=include_usage,
            )
        elif isinstance(e, live.Failed):
            yield {"error": openai_error_of(e.error)}
        elif e is None:
            yield None
        elif out is None:
            raise ValueError(f"{type(e).__name__} before the stream started")
        elif isinstance(e, live.Opened):
            if (first := out.opening(e.index)) is not None:
                yield first
        elif isinstance(e, live.Text):
            if (chunk := out.text(e.index, e.text, e.pieces)) is not None:
                yield chunk
        elif isinstance(e, live.Finished):
            yield out.finish(e.index, e.choice.finish_reason)
        elif isinstance(e, live.Ended) and (last := out.usage(e.done)) is not None:
            yield last


def _chunks(done: Completed, chat: bool, logprobs: bool, include_usage: bool) -> Iterator[dict]:
    chunks = chunks_of(
        live.replayed(done),
        chat=chat,
        model=done.model,
        tokenizer=done.tokenizer,
        logprobs=logprobs,
        include_usage=include_usage,
    )
    return (c for c in chunks if c is not None)


def chat_chunks(done: Completed, *, logprobs: bool, include_usage: bool) -> Iterator[dict]:
    return _chunks(done, True, logprobs, include_usage)


def completion_chunks(done: Completed, *, logprobs: bool, include_usage: bool) -> Iterator[dict]:
    return _chunks(done, False, logprobs, include_usage)
