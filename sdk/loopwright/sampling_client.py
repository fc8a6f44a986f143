"""SamplingClient: generation and prompt logprobs from one sampling session.

Every call is sent at once and returns a future, so many samples are in flight together.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._runtime import Runtime, wire
from ._session import Session
from ._tokenizer import load_tokenizer
from .futures import APIFuture
from .types import (
    CreateSamplingSessionRequest,
    CreateSamplingSessionResponse,
    ModelInput,
    SampleRequest,
    SampleResponse,
    SamplingParams,
    TensorData,
    WeightsInfoResponse,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["SamplingClient", "open_sampling_session"]

Prompt = ModelInput | Sequence[int]
"""A prompt: a ModelInput, or plain token ids (e.g. what ``tokenizer.encode`` returns)."""


def _as_model_input(prompt: Prompt) -> ModelInput:
    if isinstance(prompt, ModelInput):
        return prompt
    return ModelInput.from_ints(int(token) for token in prompt)


def open_sampling_session(
    runtime: Runtime,
    session: Session,
    *,
    model_path: str | None = None,
    base_model: str | None = None,
    model_id: str | None = None,
) -> str:
    """Open a sampling session in ``session``; returns its id."""
    if not (model_path or base_model or model_id):
        raise ValueError("pass model_path (tinker://...) or base_model")
    request = CreateSamplingSessionRequest(
        session_id=session.session_id,
        sampling_session_seq_id=session.next_sampling_session_seq_id(),
        base_model=base_model,
        model_path=model_path,
        model_id=model_id,
    )
    answer = runtime.post("create_sampling_session", CreateSamplingSessionResponse, wire(request))
    return answer.sampling_session_id


class SamplingClient:
    """Samples from one sampling session (a base model, saved weights, or a live model)."""

    def __init__(
        self,
        runtime: Runtime,
        sampling_session_id: str,
        *,
        base_model: str | None = None,
        model_path: str | None = None,
        record_stability_info: bool = False,
    ) -> None:
        self._runtime = runtime
        self.sampling_session_id = sampling_session_id
        """The sampling session's id."""
        self.record_stability_info = record_stability_info
        """Whether every sample request records its sequences (``SampledSequence.sequence_id``)
        for training requests of the same session to cite (``Datum.with_provenance``), as the
        ``stable_reinforce`` loss needs."""
        self._base_model = base_model
        self._model_path = model_path
        self._lock = threading.Lock()
        self._next_seq_id = 1
        self._tokenizer: PreTrainedTokenizerBase | None = None

    def _seq_id(self) -> int:
        with self._lock:
            value, self._next_seq_id = self._next_seq_id, self._next_seq_id + 1
            return value

    def _body(
        self,
        prompt: Prompt,
        num_samples: int,
        sampling_params: SamplingParams,
        prompt_logprobs: bool,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        request = SampleRequest(
            sampling_session_id=self.sampling_session_id,
            num_samples=num_samples,
            prompt=_as_model_input(prompt),
            sampling_params=sampling_params,
            prompt_logprobs=prompt_logprobs,
            record_stability_info=self.record_stability_info or None,
            **options,
        )
        # The seq_id is taken only once the request has validated, so errors leave no gap.
        return wire(request.model_copy(update={"seq_id": self._seq_id()}))

    def sample(
        self,
        prompt: Prompt,
        num_samples: int = 1,
        sampling_params: SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> APIFuture[SampleResponse]:
        """Generate ``num_samples`` completions of ``prompt``; sent at once, returns a future.

        As in tinker 0.38: ``topk_sample_logprobs`` reports the k likeliest tokens at each
        generated position, ``target_prompt_logprobs`` the logprobs of given ids at prompt
        positions, ``prompt_alt_tokens_k`` draws at every prompt position, and
        ``prompt_logprobs_last_n`` scores only the prompt's last tokens.
        """
        options = {
            "topk_prompt_logprobs": topk_prompt_logprobs,
            "topk_sample_logprobs": topk_sample_logprobs,
            "target_prompt_logprobs": target_prompt_logprobs,
            "prompt_alt_tokens_k": prompt_alt_tokens_k,
            "prompt_logprobs_last_n": prompt_logprobs_last_n,
        }
        body = self._body(
            prompt,
            num_samples,
            sampling_params or SamplingParams(),
            include_prompt_logprobs,
            options,
        )
        return self._runtime.operation("asample", body, SampleResponse.model_validate)

    def compute_logprobs(
        self, prompt: Prompt, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """The logprob of every prompt token under the model (None for the first, and before
        the last ``prompt_logprobs_last_n`` when given)."""
        options = {"prompt_logprobs_last_n": prompt_logprobs_last_n}
        body = self._body(prompt, 1, SamplingParams(max_tokens=1), True, options)

        def parse(data: Any) -> list[float | None]:
            return list(SampleResponse.model_validate(data).prompt_logprobs or [])

        return self._runtime.operation("asample", body, parse)

    def get_base_model(self) -> str:
        """The base model this sampler runs (looked up from its weights if needed)."""
        if self._base_model is None:
            if self._model_path is None:
                raise ValueError("this sampling client does not know its base model")
            info = self._runtime.post(
                "weights_info", WeightsInfoResponse, {"tinker_path": self._model_path}
            )
            self._base_model = info.base_model
        return self._base_model

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        """The base model's tokenizer (downloaded once, then read from the local cache)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self._runtime.http, self.get_base_model())
        return self._tokenizer

    async def sample_async(
        self,
        prompt: Prompt,
        num_samples: int = 1,
        sampling_params: SamplingParams | None = None,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        **options: Any,
    ) -> SampleResponse:
        """Async twin of sample: awaits and returns the SampleResponse."""
        return await self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            **options,
        )

    async def compute_logprobs_async(
        self, prompt: Prompt, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        """Async twin of compute_logprobs: awaits and returns the logprobs."""
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n)

    async def get_tokenizer_async(self) -> PreTrainedTokenizerBase:
        """Async twin of get_tokenizer."""
        return await asyncio.to_thread(self.get_tokenizer)
