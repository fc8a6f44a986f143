"""Sampling: generation parameters, the sample request and the sequences it returns."""

from __future__ import annotations

from typing import Literal

from ._base import RequestModel, ResponseModel
from .model_input import ModelInput

__all__ = ["SampleRequest", "SampleResponse", "SampledSequence", "SamplingParams", "StopReason"]

StopReason = Literal["length", "stop"]


class SamplingParams(ResponseModel):
    """How to generate tokens."""

    max_tokens: int | None = None
    """Most tokens to generate."""

    seed: int | None = None
    """Random seed, for reproducible generation."""

    stop: str | list[str] | list[int] | None = None
    """Stop strings or stop token ids; generation ends after the first match."""

    temperature: float = 1
    """Sampling temperature."""

    top_k: int = -1
    """Sample from the k most likely tokens; -1 means no limit."""

    top_p: float = 1
    """Nucleus sampling probability mass."""


class SampleRequest(RequestModel):
    """Generate completions of a prompt."""

    num_samples: int = 1
    """Number of completions to generate."""

    prompt: ModelInput
    """The prompt tokens."""

    sampling_params: SamplingParams
    """How to generate."""

    base_model: str | None = None
    """Base model to sample from, when no sampling session or model_path is given."""

    model_path: str | None = None
    """tinker:// path of weights to sample from, when no sampling session is given."""

    sampling_session_id: str | None = None
    """Sampling session whose model to use; given together with seq_id."""

    seq_id: int | None = None
    """Request counter within the sampling session."""

    prompt_logprobs: bool | None = None
    """Whether to return the logprob of every prompt token."""

    topk_prompt_logprobs: int = 0
    """If positive, return the k most likely tokens at every prompt position."""

    type: Literal["sample"] = "sample"
    """Request kind tag."""


class SampledSequence(ResponseModel):
    """One generated completion."""

    stop_reason: StopReason
    """Why generation ended: max_tokens reached ("length") or a stop matched ("stop")."""

    tokens: list[int]
    """Generated token ids."""

    logprobs: list[float] | None = None
    """Logprob of each generated token."""


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
