"""The outcome of one sample request and its JSON result: tinker 0.38's ``SampleResponse`` layout.

``to_wire()`` is ``loopwright.types.SampleResponse.model_dump(mode="json")``: every key present,
null where the request did not ask for it. ``prompt_cache_hit_tokens`` counts the prompt tokens
served from a prefill already computed rather than computed again: the samples of one request
share its prompt's prefill, so it is ``(num_samples - 1) × len(prompt)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from loopwright.types import PromptAltTokens, SampledSequence, SampleResponse, StopReason

from .errors import EngineError
from .prompt_scoring import PromptScores, TopK


class SampledToken(NamedTuple):
    """One token as it is drawn: of which job and sample, at which position of the sequence,
    with its logprob and (when the job asks) the most likely tokens beside it."""

    job: int
    sample: int
    position: int
    token: int
    logprob: float
    top: TopK | None


# Told the tokens of each decoding step as they are drawn (the engine's thread, between steps).
TokenSink = Callable[[Sequence[SampledToken]], None]


@dataclass
class SampledSeq:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: StopReason
    topk_logprobs: list[TopK] | None = None  # per generated token, when the job asked for them
    model_logprobs: list[float] | None = None  # the model's own, when the job asked for both


@dataclass
class SampleResult:
    sequences: list[SampledSeq]
    prompt: PromptScores
    cache_hit_tokens: int = 0  # prompt tokens not prefilled again (see the module docstring)
    error: EngineError | None = None  # the request failed while sampling (its grammar)

    @property
    def prompt_logprobs(self) -> list[float | None] | None:
        return self.prompt.prompt_logprobs

    @property
    def topk_prompt_logprobs(self) -> list[TopK | None] | None:
        return self.prompt.topk_prompt_logprobs

    def to_response(self) -> SampleResponse:
        alternatives = self.prompt.prompt_alt_tokens
        return SampleResponse(
            sequences=[
                SampledSequence(
                    tokens=s.tokens,
                    logprobs=s.logprobs,
                    stop_reason=s.stop_reason,
                    topk_logprobs=None if s.topk_logprobs is None else [*s.topk_logprobs],
                    model_logprobs=s.model_logprobs,
                )
                for s in self.sequences
            ],
            prompt_logprobs=self.prompt.prompt_logprobs,
            topk_prompt_logprobs=self.prompt.topk_prompt_logprobs,
            prompt_cache_hit_tokens=self.cache_hit_tokens,
            target_prompt_logprobs=self.prompt.target_prompt_logprobs,
            prompt_alt_tokens=None
            if alternatives is None
            else PromptAltTokens(tokens=alternatives[0], logprobs=alternatives[1]),
        )

    def to_wire(self) -> dict:
        """The JSON result of the sample operation (see the module docstring)."""
        return self.to_response().model_dump(mode="json")

    @property
    def sampled_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.sequences)
