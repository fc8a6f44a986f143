"""Provenance of a datum's positions (tinker 0.38 ``Datum.with_provenance``): consecutive runs that
tile a field, each naming a recorded sampled sequence and where its run lies in that sequence's
prompt or in its sampled tokens.

JSON: ``{"type": "prompt_tokens" | "sampled_tokens", "sequence_id", "offset", "length"}``, the
tags being the names of the protobuf ``ProvenanceSpan`` oneof's arms.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._base import RequestModel
from .limits import NonNegativeInt32

__all__ = [
    "MAX_SPANS",
    "PromptProvenanceSpan",
    "ProvenanceSpan",
    "ProvenanceSpans",
    "SampledProvenanceSpan",
    "SequenceId",
]

MAX_SPANS = 4096
"""Most runs in one span list (a run may be empty, so the field's length does not bound them)."""

SequenceId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A ``SampledSequence.sequence_id``: 1 to 200 characters, no control characters."""


class PromptProvenanceSpan(RequestModel):
    """A run of positions that are positions ``[offset, offset + length)`` of the prompt of the
    sample request that produced sequence ``sequence_id``."""

    type: Literal["prompt_tokens"] = "prompt_tokens"
    """The arm's tag."""

    sequence_id: SequenceId
    """A sequence of the sample request whose prompt holds the run."""

    offset: NonNegativeInt32 = 0
    """Where the run starts in that prompt."""

    length: NonNegativeInt32
    """How many consecutive positions the run covers (0 or more)."""


class SampledProvenanceSpan(RequestModel):
    """A run of positions that are positions ``[offset, offset + length)`` of the sampled tokens
    of sequence ``sequence_id``."""

    type: Literal["sampled_tokens"] = "sampled_tokens"
    """The arm's tag."""

    sequence_id: SequenceId
    """The sequence whose sampled tokens the run reproduces."""

    offset: NonNegativeInt32 = 0
    """Where the run starts in that sequence's sampled tokens."""

    length: NonNegativeInt32
    """How many consecutive positions the run covers (0 or more)."""


ProvenanceSpan = Annotated[
    PromptProvenanceSpan | SampledProvenanceSpan, Field(discriminator="type")
]
"""One run: of a prompt, or of sampled tokens."""

ProvenanceSpans = Annotated[list[ProvenanceSpan], Field(max_length=MAX_SPANS)]
"""Consecutive runs tiling one field (their lengths sum to its length): at most 4,096."""
