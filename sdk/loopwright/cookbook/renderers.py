"""Chat rendering with the model's own chat template, and loss masks over assistant turns.

A conversation is rendered one message at a time: each rendering must extend the previous one
(true of ChatML-style templates), so every token belongs to exactly one message and the tokens
of an assistant turn are the ones the sampler would produce after the generation prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase as Tokenizer
else:
    Tokenizer = Any  # a Hugging Face tokenizer, e.g. TrainingClient.get_tokenizer()

__all__ = [
    "Message",
    "RenderedConversation",
    "Tokenizer",
    "continuation_tokens",
    "decode",
    "extract_code_block",
    "render_conversation",
    "render_prompt",
    "train_on_mode",
]

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``."""

TrainOn = Literal["assistant", "last_assistant", "all"]
TRAIN_ON: tuple[TrainOn, ...] = ("assistant", "last_assistant", "all")


def train_on_mode(name: str) -> TrainOn:
    """A train_on setting from a config, checked."""
    for mode in TRAIN_ON:
        if mode == name:
            return mode
    raise ValueError(f"train_on must be one of {', '.join(TRAIN_ON)}, got {name!r}")


@dataclass
class RenderedConversation:
    """A conversation as tokens, with weight 1.0 on the tokens the model should learn."""

    tokens: list[int]
    """All tokens of the rendered conversation."""

    weights: list[float]
    """Per token: 1.0 on trained assistant tokens (their end-of-turn token included), else 0.0."""

    @property
    def trained_tokens(self) -> int:
        """How many tokens carry weight."""
        return int(sum(self.weights))


def decode(tokenizer: Tokenizer, tokens: Sequence[int]) -> str:
    """Sampled tokens as text, special tokens (e.g. end of turn) left out."""
    return str(tokenizer.decode(list(tokens), skip_special_tokens=True))


def _render(tokenizer: Tokenizer, messages: Sequence[Message], generation_prompt: bool) -> str:
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=generation_prompt
    )
    return str(text)


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def render_prompt(tokenizer: Tokenizer, messages: Sequence[Message]) -> list[int]:
    """The tokens that open the next assistant turn after ``messages`` (the sampling prompt)."""
    return _encode(tokenizer, _render(tokenizer, messages, generation_prompt=True))


def _split_end_of_turn(tokenizer: Tokenizer, body: str) -> tuple[str, str]:
    """An assistant turn's text: the part the model writes (through its end-of-turn token) and
    what the template adds after it (e.g. a newline)."""
    eos = tokenizer.eos_token
    if isinstance(eos, str) and eos and (index := body.rfind(eos)) >= 0:
        cut = index + len(eos)
        return body[:cut], body[cut:]
    return body, ""


def render_conversation(
    tokenizer: Tokenizer, messages: Sequence[Message], train_on: TrainOn = "assistant"
) -> RenderedConversation:
    """Render ``messages`` and mark the tokens to train on.

    ``train_on``: every assistant turn, only the last one, or every token ("all").
    Raises ValueError when the template does not render the conversation incrementally.
    """
    last_assistant = max(
        (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1
    )
    tokens: list[int] = []
    weights: list[float] = []
    rendered = ""

    def add(text: str, weight: float) -> None:
        ids = _encode(tokenizer, text)
        tokens.extend(ids)
        weights.extend([weight] * len(ids))

    if messages and messages[0]["role"] == "assistant":
        raise ValueError("a conversation cannot open with an assistant turn: it has no prompt")
    for index, message in enumerate(messages):
        trained = train_on == "all" or (
            message["role"] == "assistant" and (train_on == "assistant" or index == last_assistant)
        )
        if message["role"] == "assistant":
            header = _render(tokenizer, messages[:index], generation_prompt=True)
            add(_extension(rendered, header, index), 1.0 if train_on == "all" else 0.0)
            rendered = header
        full = _render(tokenizer, messages[: index + 1], generation_prompt=False)
        body = _extension(rendered, full, index)
        if message["role"] == "assistant":
            written, after = _split_end_of_turn(tokenizer, body)
            add(written, 1.0 if trained else 0.0)
            add(after, 1.0 if train_on == "all" else 0.0)
        else:
            add(body, 1.0 if trained else 0.0)
        rendered = full
    return RenderedConversation(tokens=tokens, weights=weights)


def _extension(before: str, after: str, index: int) -> str:
    if not after.startswith(before):
        raise ValueError(
            f"the chat template does not render message {index} as an extension of the "
            "messages before it; this conversation cannot be split into turns"
        )
    return after[len(before) :]


def continuation_tokens(
    tokenizer: Tokenizer, messages: Sequence[Message], new_messages: Sequence[Message]
) -> list[int]:
    """Tokens to append after a sampled assistant turn (ending in its end-of-turn token) so the
    context holds ``new_messages`` (e.g. a tool result) and opens the next assistant turn.

    ``messages`` ends with that assistant turn, its content as decoded from the sample.
    """
    before, _ = _split_end_of_turn(tokenizer, _render(tokenizer, messages, generation_prompt=False))
    after = _render(tokenizer, [*messages, *new_messages], generation_prompt=True)
    return _encode(tokenizer, _extension(before, after, len(messages)))


_CODE_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code_block(text: str) -> str | None:
    """The last fenced code block (```python ... ```) in ``text``, or None."""
    blocks = _CODE_BLOCK.findall(text)
    return blocks[-1] if blocks else None
