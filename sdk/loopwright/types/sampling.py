"""Sampling: generation parameters, the sample request and the sequences it returns.

Field names and layouts follow tinker 0.38; a sample result's JSON is ``SampleResponse``'s
``model_dump(mode="json")``: every key below is always present, null where not asked for.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ._base import RequestModel, ResponseModel
from .limits import INT32_MAX, BaseModelName, Counter, Id, Seed, TinkerPath, TokenId
from .model_input import ModelInput
from .sampling_controls import (
    JsonSchema,
    LarkGrammar,
    LogitBias,
    LogprobsOf,
    MinP,
    Penalty,
    Regex,
    RepetitionPenalty,
)
from .tensor_data import TensorData

__all__ = [
    "PromptAltTokens",
    "SampleRequest",
    "SampleResponse",
    "SampledSequence",
    "SamplingParams",
    "StopReason",
    "TopK",
]

StopReason = Literal["length", "stop"]

StopString = Annotated[str, Field(max_length=1000)]

TopK = list[tuple[int, float]]
"""Up to k ``(token_id, logprob)`` pairs, most likely first (JSON: ``[[id, logprob], ...]``)."""


class SamplingParams(ResponseModel):
    """How to generate tokens."""

    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    """Most tokens to generate (prompt and completion must fit the base model's context)."""

    seed: Seed | None = None
    """Random seed, for reproducible generation: any int64."""

    stop: (
        StopString
        | Annotated[list[StopString], Field(max_length=64)]
        | Annotated[list[TokenId], Field(max_length=64)]
        | None
    ) = None
    """Stop strings or stop token ids (at most 64, strings of at most 1,000 characters);
    generation ends after the first match."""

    temperature: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1
    """Sampling temperature: 0 to 100."""

    top_k: Annotated[int, Field(ge=-1, le=INT32_MAX)] = -1
    """Sample from the k most likely tokens; -1 means no limit."""

    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1
    """Nucleus sampling probability mass: above 0, at most 1."""

    # Loopwright's controls (docs/sampling.md); the official tinker SDK cannot send them.
    min_p: MinP | None = None
    """Keep tokens whose probability (after temperature) is at least min_p × the likeliest
    token's: 0 to 1; None or 0 is off."""

    repetition_penalty: RepetitionPenalty | None = None
    """Penalise every token already in the prompt or the completion: a positive logit is
    divided by it, a negative one multiplied; above 0, None or 1 is off."""

    presence_penalty: Penalty | None = None
    """Subtracted once from the logit of every token the completion already holds: −2 to 2."""

    frequency_penalty: Penalty | None = None
    """Subtracted from a token's logit once per time the completion already holds it: −2 to 2."""

    logit_bias: LogitBias | None = None
    """Token id (decimal string, or int in Python) → −100 to 100 added to its logit; −100 bans
    the token, 100 forces it (only forced tokens may be drawn)."""

    json_schema: JsonSchema | None = None
    """The completion is JSON that satisfies this schema (``{"type": "object"}``: any object)."""

    regex: Regex | None = None
    """The completion matches this regular expression, whole."""

    grammar: LarkGrammar | None = None
    """The completion is a sentence of this grammar (llguidance's Lark syntax)."""

    logprobs_of: LogprobsOf | None = None
    """Which law ``logprobs`` (and the top-k logprobs) are of: ``sampled`` (None: the law each
    token was drawn from), ``model`` (the model's own, as the trainer's ``forward``), or
    ``both`` (``sampled``, plus ``SampledSequence.model_logprobs``)."""

    @model_validator(mode="after")
    def _one_structure(self) -> SamplingParams:
        given = [n for n in ("json_schema", "regex", "grammar") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of json_schema, regex and grammar, not {given}")
        return self


class SampleRequest(RequestModel):
    """Generate completions of a prompt."""

    num_samples: Annotated[int, Field(ge=1, le=128)] = 1
    """Number of completions to generate: 1 to 128."""

    prompt: ModelInput
    """The prompt tokens."""

    sampling_params: SamplingParams
    """How to generate."""

    base_model: BaseModelName | None = None
    """Base model to sample from, when no sampling session or model_path is given."""

    model_path: TinkerPath | None = None
    """tinker:// path of weights to sample from, when no sampling session is given."""

    sampling_session_id: Id | None = None
    """Sampling session whose model to use; given together with seq_id."""

    seq_id: Counter | None = None
    """Request counter within the sampling session: 0 to 2^31 − 1."""

    prompt_logprobs: bool | None = None
    """Whether to return the logprob of every prompt token."""

    topk_prompt_logprobs: Annotated[int, Field(ge=0, le=64)] = 0
    """If positive, return the k most likely tokens at every prompt position."""

    topk_sample_logprobs: Annotated[int, Field(ge=0, le=20)] = 0
    """If positive, return the k most likely tokens at every generated position
    (``SampledSequence.topk_logprobs``)."""

    target_prompt_logprobs: TensorData | None = None
    """Token ids whose logprobs to return, int64 of shape ``[len(prompt) - 1, K]``: cell
    ``[i, j]`` is scored at prompt position ``i + 1``; ``-1`` asks for nothing. May be sparse
    CSR, unlisted cells meaning ``-1`` (``SampleResponse.target_prompt_logprobs``)."""

    prompt_alt_tokens_k: Annotated[int, Field(ge=0, le=64)] = 0
    """If positive, draw this many tokens at the request's temperature from the model's
    next-token distribution at every prompt position after the first
    (``SampleResponse.prompt_alt_tokens``)."""

    prompt_logprobs_last_n: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    """Score only the last N prompt tokens (earlier entries are None); needs prompt_logprobs,
    between 1 and len(prompt) - 1; also applies to topk_prompt_logprobs."""

    record_stability_info: bool | None = None
    """Record every returned sequence (its prompt, sampled tokens and their logprobs) so that
    training requests can cite it by ``sequence_id`` in their provenance spans (the
    ``stable_reinforce`` loss needs it); a recorded sequence stays citable by this session for a
    day after its last use."""

    type: Literal["sample"] = "sample"
    """Request kind tag."""


class SampledSequence(ResponseModel):
    """One generated completion."""

    stop_reason: StopReason
    """Why generation ended: max_tokens reached ("length") or a stop matched ("stop")."""

    tokens: list[int]
    """Generated token ids."""

    logprobs: list[float] | None = None
    """Logprob of each generated token, under the law ``sampling_params.logprobs_of`` names
    (by default the distribution it was drawn from)."""

    model_logprobs: list[float] | None = None
    """With ``logprobs_of="both"``: the model's own logprob of each generated token
    (temperature 1, no control applied), as the trainer's ``forward`` computes it."""

    topk_logprobs: list[TopK | None] | None = None
    """Per generated token, the most likely tokens under the law of ``logprobs``, if
    ``topk_sample_logprobs`` (or ``topk_logprobs``) asked for them."""

    sequence_id: str | None = None
    """The sequence's id (``<request_id>:<i>``), unique in the account; a training request of the
    same session cites a recorded sequence by it (``Datum.with_provenance``)."""


class PromptAltTokens(ResponseModel):
    """Tokens drawn at every prompt position after the first, with their logprobs."""

    tokens: TensorData
    """int64 ``[len(prompt) - 1, k]``: row ``i`` holds k draws (with replacement, at the
    request's temperature) for prompt position ``i + 1``."""

    logprobs: TensorData
    """float32 ``[len(prompt) - 1, k]``: the model's (untempered) logprob of each draw."""


class SampleResponse(ResponseModel):
    """The completions of a sample request."""

    sequences: list[SampledSequence]
    """One entry per requested sample."""

    type: Literal["sample"] = "sample"
    """Response kind tag."""

    prompt_logprobs: list[float | None] | None = None
    """Logprob of each prompt token (None where not computed, e.g. the first), if requested."""

    topk_prompt_logprobs: list[list[tuple[int, float]] | None] | None = None
    """Per prompt position, up to k (token_id, logprob) pairs or None, if requested."""

    prompt_cache_hit_tokens: int = 0
    """Prompt tokens served from the prefix cache (counted once per prompt)."""

    target_prompt_logprobs: TensorData | None = None
    """Logprobs of the ids in the request's ``target_prompt_logprobs``: float32, same shape and
    layout (sparse stays sparse, same indices), 0.0 where the request had -1."""

    prompt_alt_tokens: PromptAltTokens | None = None
    """The draws ``prompt_alt_tokens_k`` asked for."""
