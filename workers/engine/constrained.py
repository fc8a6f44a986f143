"""Grammar-constrained rows: one llguidance matcher per sequence, and the mask of the tokens its
grammar allows next, for many rows at once.

A job's structure (``loopwright.structured_output``) is compiled once and copied per sample. A
sequence whose grammar is complete stops ("stop"); a matcher that errs (a limit reached while
sampling) fails its request alone with the reason.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
import torch

from loopwright.structured_output import Structure, parser_limits

from .errors import InvalidInput

if TYPE_CHECKING:
    from llguidance import LLExecutor, LLMatcher, LLTokenizer
    from transformers import PreTrainedTokenizerBase

COMPILED_KEPT = 64  # compiled structures kept per host (a template per distinct structure)
PARALLEL_FROM = 16  # rows whose masks are computed on llguidance's threads rather than in turn


class Grammars:
    """A host's grammar compiler: the tokenizer as llguidance sees it (built on first use) and
    the structures compiled lately."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._lock = threading.Lock()
        self._ll: LLTokenizer | None = None
        self._executor: LLExecutor | None = None
        self._compiled: OrderedDict[Structure, LLMatcher | str] = OrderedDict()

    def ll_tokenizer(self) -> LLTokenizer:
        with self._lock:
            if self._ll is None:
                import llguidance.hf

                self._ll = llguidance.hf.from_tokenizer(self.tokenizer)  # type: ignore[arg-type]
            return self._ll

    def executor(self) -> LLExecutor:
        with self._lock:
            if self._executor is None:
                from llguidance import LLExecutor

                self._executor = LLExecutor()
            return self._executor

    def check(self, structure: Structure | None, field: str) -> None:
        """Refuse a structure llguidance cannot compile, naming ``field`` and the reason."""
        if structure is not None:
            self.compiled(structure, field)

    def compiled(self, structure: Structure, field: str) -> LLMatcher:
        """A fresh matcher at the start of ``structure``."""
        with self._lock:
            found = self._compiled.get(structure)
            if found is not None:
                self._compiled.move_to_end(structure)
        if found is None:
            found = _compile(structure, self.ll_tokenizer())
            with self._lock:
                self._compiled[structure] = found
                while len(self._compiled) > COMPILED_KEPT:
                    self._compiled.popitem(last=False)
        if isinstance(found, str):
            raise InvalidInput(field, f"cannot be compiled: {found}")
        return found.deep_copy()

    def allowed(self, matchers: list[LLMatcher], device: torch.device) -> torch.Tensor:
        """``[len(matchers), vocab_size]`` bool: the tokens each matcher's grammar allows next
        (ids past the tokenizer's are never allowed)."""
        from llguidance.numpy import (
            allocate_token_bitmask,
            fill_next_token_bitmask,
            fill_next_token_bitmask_par,
        )

        ll_vocab = self.ll_tokenizer().vocab_size
        bits_G_W = allocate_token_bitmask(len(matchers), ll_vocab)
        if len(matchers) >= PARALLEL_FROM:
            pairs = [(m, i) for i, m in enumerate(matchers)]
            fill_next_token_bitmask_par(self.executor(), pairs, bits_G_W)
        else:  # a few masks: waking the executor's threads costs more than it saves
            for i, m in enumerate(matchers):
                fill_next_token_bitmask(m, bits_G_W, i)
        bits_G_B = np.unpackbits(bits_G_W.view(np.uint8), axis=1, bitorder="little")
        width = min(ll_vocab, self.vocab_size)
        allowed = np.zeros((len(matchers), self.vocab_size), dtype=bool)
        allowed[:, :width] = bits_G_B[:, :width]
        return torch.from_numpy(allowed).to(device)


def _compile(structure: Structure, ll: LLTokenizer) -> LLMatcher | str:
    """The matcher of ``structure`` at its start, or why it cannot be compiled."""
    from llguidance import LLMatcher

    try:
        grammar = structure.grammar()
    except ValueError as exc:  # a schema that is not a JSON object
        return str(exc)
    matcher = LLMatcher(ll, grammar, log_level=0, limits=parser_limits())
    if matcher.is_error():
        return matcher.get_error()
    return matcher
