"""The JSON answers: ``chat.completion`` and ``text_completion`` objects, their logprobs in
each endpoint's own layout, and usage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controlplane.completions.rendering import Piece, token_text
from controlplane.completions.services import Completed

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def usage(done: Completed) -> dict:
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }


def _token(tokenizer: PreTrainedTokenizerBase, token_id: int, logprob: float) -> dict:
    shown = token_text(tokenizer, token_id)
    return {"token": shown.text, "logprob": logprob, "bytes": shown.bytes}


def chat_logprobs(tokenizer: PreTrainedTokenizerBase, pieces: list[Piece]) -> dict:
    """``{"content": [{token, logprob, bytes, top_logprobs: [...]}, ...], "refusal": null}``."""
    content = [
        {
            **_token(tokenizer, p.token_id, p.logprob),
            "top_logprobs": [_token(tokenizer, t, lp) for t, lp in p.top],
        }
        for p in pieces
    ]
    return {"content": content, "refusal": None}


def completion_logprobs(tokenizer: PreTrainedTokenizerBase, pieces: list[Piece]) -> dict:
    """``{tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}``."""
    return {
        "tokens": [token_text(tokenizer, p.token_id).text for p in pieces],
        "token_logprobs": [p.logprob for p in pieces],
        "top_logprobs": [{token_text(tokenizer, t).text: lp for t, lp in p.top} for p in pieces],
        "text_offset": [p.offset for p in pieces],
    }


def chat_completion(done: Completed, *, logprobs: bool) -> dict:
    return {
        "id": done.id,
        "object": "chat.completion",
        "created": done.created,
        "model": done.model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text, "refusal": None},
                "logprobs": chat_logprobs(done.tokenizer, c.pieces) if logprobs else None,
                "finish_reason": c.finish_reason,
            }
            for i, c in enumerate(done.choices)
        ],
        "usage": usage(done),
    }


def text_completion(done: Completed, *, logprobs: bool) -> dict:
    return {
        "id": done.id,
        "object": "text_completion",
        "created": done.created,
        "model": done.model,
        "choices": [
            {
                "index": i,
                "text": c.text,
                "logprobs": completion_logprobs(done.tokenizer, c.pieces) if logprobs else None,
                "finish_reason": c.finish_reason,
            }
            for i, c in enumerate(done.choices)
        ],
        "usage": usage(done),
    }
