"""The sampling controls beyond temperature, top-k and top-p: logits processors, structured
output and the choice of logprobs, as fields of ``SamplingParams``, with their wire bounds.

docs/sampling.md says what each does, in which order, and on which face.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

__all__ = [
    "MAX_GRAMMAR_CHARS",
    "MAX_LOGIT_BIAS",
    "MAX_REGEX_CHARS",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "JsonSchema",
    "LarkGrammar",
    "LogitBias",
    "LogprobsOf",
    "MinP",
    "Penalty",
    "Regex",
    "RepetitionPenalty",
]

MAX_LOGIT_BIAS = 1024  # entries of one logit_bias map
MAX_SCHEMA_BYTES = 32 * 1024  # a JSON schema, as compact JSON
MAX_SCHEMA_DEPTH = 32  # nesting of its objects and arrays
MAX_REGEX_CHARS = 4096
MAX_GRAMMAR_CHARS = 32 * 1024

_DECIMAL_ID = re.compile(r"(0|[1-9][0-9]{0,9})")

MinP = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""Keep only tokens whose probability is at least ``min_p`` × the likeliest token's: 0 to 1."""

RepetitionPenalty = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""Divides a positive logit (multiplies a negative one) of every token already in the prompt or
the completion: above 0 (finite); 1 is off."""

Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
"""An OpenAI presence or frequency penalty: −2 to 2; 0 is off."""


def _bias_keys(value: Any) -> Any:
    """Token ids may be given as ints in Python; on the wire they are decimal strings."""
    if isinstance(value, dict):
        return {
            str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v
            for k, v in value.items()
        }
    return value


def _decimal_ids(value: dict[str, float]) -> dict[str, float]:
    for key in value:
        if not _DECIMAL_ID.fullmatch(key):
            raise ValueError(f"keys are token ids in decimal (such as '198'), got {key!r}")
    return value


LogitBias = Annotated[
    dict[str, Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]],
    BeforeValidator(_bias_keys),
    Field(max_length=MAX_LOGIT_BIAS),
    AfterValidator(_decimal_ids),
]
"""Token id (decimal) → a value from −100 to 100 added to its logit; −100 bans the token and 100
forces it (only forced tokens may be drawn). At most 1,024 entries."""


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_SCHEMA_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def _bounded_schema(value: dict[str, Any]) -> dict[str, Any]:
    if _depth(value) > MAX_SCHEMA_DEPTH:
        raise ValueError(f"nests deeper than {MAX_SCHEMA_DEPTH} levels")
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"is {size} bytes as JSON, more than {MAX_SCHEMA_BYTES}")
    return value


JsonSchema = Annotated[dict[str, Any], AfterValidator(_bounded_schema)]
"""A JSON schema the answer must satisfy (at most 32 KiB as JSON, 32 levels deep)."""

Regex = Annotated[str, Field(min_length=1, max_length=MAX_REGEX_CHARS)]
"""A regular expression the whole answer must match (at most 4,096 characters)."""

LarkGrammar = Annotated[str, Field(min_length=1, max_length=MAX_GRAMMAR_CHARS)]
"""A context-free grammar in llguidance's Lark syntax, from its ``start`` rule (at most 32 KiB)."""

LogprobsOf = Literal["sampled", "model", "both"]
"""Which law the returned logprobs are of: ``sampled`` (the distribution each token was drawn
from, after every control), ``model`` (the model's own: temperature 1, nothing applied), or
``both`` (``sampled`` in ``logprobs``, ``model`` in ``model_logprobs``)."""
