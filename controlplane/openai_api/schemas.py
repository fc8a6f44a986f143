"""The request bodies of ``/v1/chat/completions`` and ``/v1/completions``, as OpenAI defines
them, with Loopwright's sampling controls beside OpenAI's own (docs/sampling.md); an unknown or
unsupported parameter, or a value out of its range, is a 400 naming it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controlplane.errors import DomainError
from loopwright.types.limits import INT32_MAX, TokenId
from loopwright.types.sampling_controls import LogitBias, MinP, Penalty, RepetitionPenalty

from .response_format import ResponseFormat

MAX_CHOICES = 128  # n × prompts: the engine's samples per request
MAX_STOPS = 16
MAX_TOP_LOGPROBS = 20


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool = False
    """Send one more chunk before ``[DONE]`` with the request's usage (and no choices)."""

    include_obfuscation: bool | None = None
    """Accepted and ignored (nothing is obfuscated)."""


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImageURL(_Body):
    url: str = Field(max_length=14_000_000)
    """A ``data:image/png;base64,...`` or ``data:image/jpeg;base64,...`` URI; remote URLs are
    not fetched (docs/vision.md)."""

    detail: Literal["auto", "low", "high"] | None = None
    """Accepted and ignored: the model's processor decides."""


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: ImageURL


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart | ImagePart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def images(self) -> list[ImagePart]:
        if isinstance(self.content, str):
            return []
        return [part for part in self.content if isinstance(part, ImagePart)]


class _Sampling(_Body):
    """What both endpoints share: the model, how to draw, and how to answer."""

    model: str = Field(min_length=1, max_length=2000)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX)
    """Not OpenAI's: sample from the k most likely tokens (-1: no limit), as vLLM accepts."""
    n: int | None = Field(None, ge=1, le=MAX_CHOICES)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    logit_bias: LogitBias | None = None
    min_p: MinP | None = None
    """Not OpenAI's (as vLLM takes it): keep tokens at least min_p × the likeliest's probability."""
    repetition_penalty: RepetitionPenalty | None = None
    """Not OpenAI's (as vLLM takes it): > 0, 1 is off."""
    logprobs_mode: Literal["sampled", "model"] | None = None
    """Not OpenAI's: the law of the returned logprobs (default ``sampled``)."""
    response_format: ResponseFormat | None = None
    user: str | None = None
    # accepted for compatibility; they change nothing here
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> _Sampling:
        if self.stream_options is not None and not self.stream:
            raise _unsupported("stream_options", "is only allowed when stream is true")
        if self.top_k == 0:
            raise _unsupported("top_k", "must be -1 (no limit) or at least 1")
        stops = self.stop_strings
        if len(stops) > MAX_STOPS:
            raise _unsupported("stop", f"at most {MAX_STOPS} stop sequences")
        if any(s == "" for s in stops):
            raise _unsupported("stop", "stop sequences must not be empty")
        return self

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def choices_per_prompt(self) -> int:
        return self.n or 1

    @property
    def include_usage_chunk(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _chat_supported(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise _unsupported("top_logprobs", "needs logprobs to be true")
        if self.tools:
            raise _unsupported("tools", "tool calls are not supported")
        if self.tool_choice not in (None, "none"):
            raise _unsupported("tool_choice", "tool calls are not supported")
        return self

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def top_k_logprobs(self) -> int:
        return (self.top_logprobs or 0) if self.logprobs else 0

    @property
    def wants_logprobs(self) -> bool:
        return bool(self.logprobs)


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    max_tokens: int | None = Field(16, ge=1, le=INT32_MAX)
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=MAX_CHOICES)

    @model_validator(mode="after")
    def _completion_supported(self) -> CompletionRequest:
        if self.echo:
            raise _unsupported("echo", "is not supported")
        if self.suffix:
            raise _unsupported("suffix", "is not supported")
        if self.best_of is not None and self.best_of != self.choices_per_prompt:
            raise _unsupported("best_of", "must equal n (every sample is returned)")
        if isinstance(self.prompt, list) and not self.prompt:
            raise _unsupported("prompt", "must not be empty")
        if len(self.prompts) * self.choices_per_prompt > MAX_CHOICES:
            raise _unsupported("n", f"prompts × n must be at most {MAX_CHOICES}")
        return self

    @property
    def prompts(self) -> list[str | list[int]]:
        """One entry per prompt: its text, or its token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    @property
    def top_k_logprobs(self) -> int:
        return self.logprobs or 0

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None


def _unsupported(param: str, message: str) -> DomainError:
    return DomainError(f"{param}: {message}", field=param)
