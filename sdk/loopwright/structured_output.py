"""Structured output as the service compiles it: a JSON schema, a regular expression or a Lark
grammar becomes an llguidance grammar, checked within bounds that keep each token's work small.

The server (every face) and its engine use this one module; a script may too, to check a schema
before sending it (``pip install loopwright[structured]``). llguidance is imported on first use.
Its lexer builds a DFA lazily from regex derivatives, so matching is linear in the text and never
backtracks; ``parser_limits`` caps the work of building it and of each token's mask.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from llguidance import LLParserLimits

    from .types import SamplingParams

__all__ = ["LIMITS", "Structure", "compile_error", "parser_limits"]

Kind = Literal["json_schema", "regex", "grammar"]

LIMITS = {
    "initial_lexer_fuel": 1_000_000,  # building the lexer: about 20 ms of work
    "step_lexer_fuel": 200_000,  # one token's mask, lexer: about 14 ms
    "step_max_items": 50_000,  # one token's mask, parser: about 2.5 ms
    "max_lexer_states": 10_000,  # memory: about 1-2 kB each
    "max_grammar_size": 100_000,  # symbols in the grammar's productions
    "max_items_in_row": 2_000,
}
"""llguidance's parser limits, the same for the check and for sampling (docs/sampling.md)."""

# Compact JSON unless the schema's own "x-guidance" options say otherwise: no run of whitespace
# can fill the completion.
JSON_DEFAULTS = {"whitespace_flexible": False}


@dataclass(frozen=True)
class Structure:
    """What a completion must be: ``spec`` is a schema's JSON text, a regex or a Lark grammar."""

    kind: Kind
    spec: str

    @classmethod
    def of(cls, params: SamplingParams) -> Structure | None:
        if params.json_schema is not None:
            return cls("json_schema", json.dumps(params.json_schema, separators=(",", ":")))
        if params.regex is not None:
            return cls("regex", params.regex)
        if params.grammar is not None:
            return cls("grammar", params.grammar)
        return None

    def grammar(self) -> str:
        """The llguidance grammar (its JSON text)."""
        from llguidance import LLMatcher

        if self.kind == "json_schema":
            return LLMatcher.grammar_from_json_schema(self.spec, defaults=JSON_DEFAULTS)  # type: ignore[arg-type]
        if self.kind == "regex":
            return LLMatcher.grammar_from_regex(self.spec)
        return LLMatcher.grammar_from_lark(self.spec)


def parser_limits() -> LLParserLimits:
    from llguidance import LLParserLimits

    return LLParserLimits(**LIMITS, verbose_errors=False)  # type: ignore[arg-type]


def compile_error(structure: Structure, tokenizer: Any = None) -> str | None:
    """Why llguidance cannot compile ``structure`` (within the limits), or None if it can.
    ``tokenizer``: an ``llguidance.LLTokenizer`` to check against, if at hand."""
    from llguidance import LLMatcher

    try:
        grammar = structure.grammar()
    except ValueError as exc:  # a schema that is not a JSON object
        return str(exc)
    error = LLMatcher.validate_grammar(grammar, tokenizer, limits=parser_limits())
    return error.strip() or None
