"""One choice's text while its tokens arrive: what may be sent now, and what the finished
choice adds. Knows nothing of Django, notices or requests.

Text is sent only once it cannot change: a character split across tokens waits for its end, and
text that could begin a stop sequence waits until it cannot (a stop sequence found ends what is
sent before it). Tokens may arrive more than once, late or not at all: each is taken at its
position, once; what never came is sent from the finished choice, so the stream is the whole
answer, each token once and in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .rendering import REPLACEMENT, Choice, Piece

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def sendable(text: str, stops: list[str]) -> int:
    """How much of ``text`` (generated so far) may be sent: up to the first stop sequence in
    it, else all but an unfinished character at its end and the longest end of it that some
    stop sequence begins with."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    if found:
        return min(found)
    end = len(text.rstrip(REPLACEMENT))
    held = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, end), held, -1):
            if text.endswith(stop[:k], 0, end):
                held = k
                break
    return end - held


@dataclass(frozen=True)
class Update:
    """What to send of one choice: new text and the tokens whose text is now all sent."""

    text: str
    pieces: list[Piece]


class ChoiceText:
    """The tokens of one choice as they arrive, and what of them is sent."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.tokens: list[int] = []  # the tokens from position 0 with no gap
        self._drawn: list[tuple[float, list[tuple[int, float]]]] = []  # their logprobs, tops
        self._early: dict[int, tuple[int, float, list[tuple[int, float]]]] = {}  # after a gap
        self._starts = [0]  # len(text of tokens[:i]) for i = 0..len(tokens)
        self._text = ""
        self.sent = ""  # the text sent so far
        self.released = 0  # tokens sent (with their logprobs), from the first
        self.ended = False  # a stop sequence was found: nothing more until the finished choice

    def add(self, position: int, token: int, logprob: float, top: list | None) -> None:
        """A token drawn at ``position``; one seen before is ignored."""
        if position < len(self.tokens) or position in self._early:
            return
        self._early[position] = (token, logprob, list(top or []))
        while len(self.tokens) in self._early:
            token, logprob, top = self._early.pop(len(self.tokens))
            self.tokens.append(token)
            self._drawn.append((logprob, top))

    def update(self) -> Update | None:
        """What may be sent now beyond what was (None: nothing)."""
        if self.ended:
            return None
        for i in range(len(self._starts), len(self.tokens) + 1):
            self._text = str(self.tokenizer.decode(self.tokens[:i], skip_special_tokens=True))
            self._starts.append(len(self._text))
        if not self._text.startswith(self.sent):
            self.ended = True  # the tokenizer rewrote sent text: the finished choice says the rest
            return None
        upto = sendable(self._text, self.stops)
        self.ended = any(s in self._text for s in self.stops)
        text = self._text[len(self.sent) : upto] if upto > len(self.sent) else ""
        self.sent += text
        pieces = []
        sent = len(self.sent)
        # a token goes once its text lies wholly in what is sent (and does not begin at its end)
        while (
            self.released < len(self.tokens)
            and self._starts[self.released] < sent
            and self._starts[self.released + 1] <= sent
        ):
            i = self.released
            logprob, top = self._drawn[i]
            pieces.append(Piece(self.tokens[i], "", self._starts[i], logprob, top))
            self.released += 1
        if not text and not pieces:
            return None
        return Update(text, pieces)

    def finish(self, final: Choice) -> Update:
        """The rest of the finished choice: its text after what was sent, its tokens after those
        sent."""
        if not final.text.startswith(self.sent):  # not expected: text once sent never changes
            raise ValueError("the streamed text is not a prefix of the finished choice")
        return Update(final.text[len(self.sent) :], final.pieces[self.released :])
