"""Text and tokens for the chat faces: a tokenizer built from the files a worker registered,
chat messages rendered with the model's chat template, and sampled sequences turned back into
text, a finish reason (and the stop sequence that ended it) and per-token logprobs. Knows
nothing of Django or requests."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane.errors import DomainError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REPLACEMENT = "\ufffd"  # what decoding shows for an incomplete UTF-8 sequence
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class RenderError(DomainError):
    """Messages or a prompt the model's tokenizer cannot turn into tokens."""


def tokenizer_load(files: dict[str, str], chat_template: str | None) -> PreTrainedTokenizerBase:
    """A tokenizer from its files (name → text), with ``chat_template`` if its files lack one.
    transformers is imported here, on first use: the control plane loads without it."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="lw-tokenizer-") as folder:
        for name, text in files.items():
            if Path(name).name != name or name in ("", ".", ".."):
                raise ValueError(f"unsafe tokenizer file name {name!r}")
            (Path(folder) / name).write_text(text, encoding="utf-8")
        tokenizer = AutoTokenizer.from_pretrained(folder)  # everything is read into memory
    if not tokenizer.chat_template and chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, str]],
    *,
    continue_final: bool = False,
) -> list[int]:
    """Token ids of ``messages`` in the chat template, opening the assistant's turn (or, with
    ``continue_final``, leaving the final message's turn open: its text is continued).

    Control tokens inside message text are encoded as plain text: only the template writes
    role markers, so a message cannot forge another turn.
    """
    if not tokenizer.chat_template:
        raise RenderError(
            "this model has no chat template: use /v1/completions with a prompt", field="messages"
        )
    try:
        out: Any = tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=not continue_final,
            continue_final_message=continue_final,
            tokenize=True,
            return_dict=True,
            sanitize_control_tokens=True,
        )
    except Exception as exc:  # the template's own raise_exception(...) or a jinja error
        raise RenderError(
            f"messages: the chat template refused them: {exc}", field="messages"
        ) from exc
    return list(out["input_ids"])


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
    """A completion prompt's ids, with the special tokens the tokenizer adds (e.g. BOS)."""
    return list(tokenizer.encode(prompt, add_special_tokens=True))


# -- from sampled tokens back to text -------------------------------------------------------
@dataclass(frozen=True)
class TokenText:
    """A token as OpenAI shows it: its text and its UTF-8 bytes."""

    text: str
    bytes: list[int]


@dataclass(frozen=True)
class Piece:
    """One generated token of a completion's text."""

    token_id: int
    delta: str  # the text it adds, as streamed (a split UTF-8 character waits for its end)
    offset: int  # where its text starts in the completion
    logprob: float
    top: list[tuple[int, float]]  # the most likely tokens at its position, when asked for


@dataclass(frozen=True)
class Choice:
    text: str
    finish_reason: str  # "stop" (end of sequence or a stop sequence) or "length"
    pieces: list[Piece]
    sampled_tokens: int  # every token generated (metered), the cut-off ones included
    stop: str | None = None  # the stop sequence the text ends before, when one ended it


def choice_of(
    tokenizer: PreTrainedTokenizerBase, sequence: dict, stops: list[str], eos_id: int | None
) -> Choice:
    """A sampled sequence as a choice: a final end-of-sequence token is not text, and the text
    ends before the first stop sequence (which sets ``finish_reason`` to "stop")."""
    tokens: list[int] = list(sequence["tokens"])
    logprobs: list[float] = list(sequence.get("logprobs") or [0.0] * len(tokens))
    tops = sequence.get("topk_logprobs") or [[] for _ in tokens]
    finish = "stop" if sequence.get("stop_reason") == "stop" else "length"
    body = tokens[:-1] if finish == "stop" and tokens and tokens[-1] == eos_id else tokens
    prefixes = [
        str(tokenizer.decode(body[:i], skip_special_tokens=True)) for i in range(len(body) + 1)
    ]
    text = prefixes[-1]
    matched = _first_stop(text, stops)
    if matched is not None:
        text, finish = text[: text.find(matched)], "stop"
    pieces: list[Piece] = []
    sent = 0
    for i, token in enumerate(body):
        offset = min(len(prefixes[i]), len(text))
        if matched is not None and offset >= len(text):
            break  # this token begins at or after the stop sequence
        shown = prefixes[i + 1][: len(text)]
        last = i + 1 == len(body)
        if shown.endswith(REPLACEMENT) and not last:
            shown = shown[:sent]  # half a character: wait for the rest
        delta = text[sent:] if last else shown[sent:]
        sent += len(delta)
        pieces.append(Piece(token, delta, offset, logprobs[i], [(t, v) for t, v in tops[i]]))
    if pieces and sent < len(text):  # a stop sequence cut the text inside a held-back character
        p = pieces[-1]
        pieces[-1] = Piece(p.token_id, p.delta + text[sent:], p.offset, p.logprob, p.top)
    return Choice(text, finish, pieces, len(tokens), matched)


def _first_stop(text: str, stops: list[str]) -> str | None:
    """The stop sequence the text ends before: the one found first in it (of those found at the
    same place, the shortest, which generation met first)."""
    found = [(i, len(s), s) for s in stops if (i := text.find(s)) >= 0]
    return min(found)[2] if found else None


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable stand-ins for the 256 byte values, reversed."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    symbols = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in symbols]
    symbols.update({b: chr(256 + i) for i, b in enumerate(others)})
    return {symbol: byte for byte, symbol in symbols.items()}


def token_text(tokenizer: PreTrainedTokenizerBase, token_id: int) -> TokenText:
    """The token's bytes (byte-level and byte-fallback vocabularies are read exactly) and its
    text; bytes that are not whole UTF-8 read ``bytes:\\xe2\\x80`` as OpenAI writes them."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    raw: bytes | None = None
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if token_id not in tokenizer.all_special_ids and isinstance(piece, str):
        if type(decoder).__name__ == "ByteLevel" and all(c in _byte_decoder() for c in piece):
            raw = bytes(_byte_decoder()[c] for c in piece)
        elif match := _BYTE_FALLBACK.fullmatch(piece):
            raw = bytes([int(match.group(1), 16)])
    if raw is None:
        raw = str(tokenizer.decode([token_id], skip_special_tokens=False)).encode("utf-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
    return TokenText(text, list(raw))
