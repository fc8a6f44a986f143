"""One sampling request as the engine runs it, built from the wire and checked before anything runs.

Every bound is checked against the base model (vocabulary, context length) and a failure is an
``InvalidInput`` naming the wire field and its limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from pydantic import ValidationError

from loopwright.types import SamplingParams, TensorData

from .errors import InvalidInput
from .logits_processors import Controls

MAX_NUM_SAMPLES = 128
MAX_TOPK_PROMPT_LOGPROBS = 64
MAX_TOPK_LOGPROBS = 20

# The request fields a sample job reads besides prompt, num_samples and sampling_params.
SAMPLE_OPTIONS = (
    "prompt_logprobs",
    "topk_prompt_logprobs",
    "topk_sample_logprobs",
    "topk_logprobs",
    "prompt_logprobs_last_n",
    "target_prompt_logprobs",
    "prompt_alt_tokens_k",
    "record_stability_info",
)


@dataclass
class SampleJob:
    """One sampling request: a prompt, how many samples, how to draw them, what to report."""

    prompt: list[int]
    num_samples: int = 1
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop_strings: list[str] = field(default_factory=list)
    stop_tokens: list[int] | None = None  # None: end-of-sequence; []: never stop early
    seed: int | None = None
    prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0
    topk_logprobs: int = 0  # the k most likely tokens at each generated position
    prompt_logprobs_last_n: int | None = None  # score only the last n prompt tokens
    target_prompt_logprobs: TensorData | None = None  # int64 [len(prompt) - 1, K], -1: none
    prompt_alt_tokens_k: int = 0  # draws at every prompt position after the first
    # the control plane records the sequences (their tokens and logprobs, which every result
    # carries) when the operation completes: nothing changes here
    record_stability_info: bool = False
    controls: Controls = field(default_factory=Controls)  # processors, structure, logprobs law
    # A prompt that holds images: the ModelInput as sent, ``prompt`` empty until the sampler of
    # a vision-language model expands it (``Sampler.validate``); then its images' tensors.
    prompt_input: Any = None
    pixels: Any = None

    @classmethod
    def from_wire(
        cls,
        prompt: Sequence[int],
        num_samples: int,
        params: SamplingParams,
        prompt_input: Any = None,
        **options: Any,
    ) -> SampleJob:
        """A job from a sample request; ``options`` are its ``SAMPLE_OPTIONS`` fields.

        ``topk_sample_logprobs`` (tinker 0.30+) and ``topk_logprobs`` name the same thing.
        """
        unknown = set(options) - set(SAMPLE_OPTIONS)
        if unknown:
            raise TypeError(f"unknown sample options {sorted(unknown)}")
        strings, tokens = _stops(params.stop)
        last_n = options.get("prompt_logprobs_last_n")
        return cls(
            prompt=list(prompt),
            num_samples=num_samples,
            max_tokens=params.max_tokens,
            temperature=float(params.temperature),
            top_k=int(params.top_k),
            top_p=float(params.top_p),
            stop_strings=strings,
            stop_tokens=tokens,
            seed=params.seed,
            prompt_logprobs=bool(options.get("prompt_logprobs")),
            topk_prompt_logprobs=int(options.get("topk_prompt_logprobs") or 0),
            topk_logprobs=int(
                options.get("topk_sample_logprobs") or options.get("topk_logprobs") or 0
            ),
            prompt_logprobs_last_n=None if last_n is None else int(last_n),
            target_prompt_logprobs=_tensor(options.get("target_prompt_logprobs")),
            prompt_alt_tokens_k=int(options.get("prompt_alt_tokens_k") or 0),
            record_stability_info=bool(options.get("record_stability_info")),
            controls=Controls.of(params),
            prompt_input=prompt_input,
        )


def _stops(stop: object) -> tuple[list[str], list[int] | None]:
    if isinstance(stop, str):
        return [stop], None
    if stop is None:
        return [], None
    items = list(cast(Sequence[object], stop))
    if not items:
        return [], []  # an explicit empty list: no stop at all, not even end-of-sequence
    if all(isinstance(s, str) for s in items):
        return [str(s) for s in items], None
    if all(isinstance(s, int) and not isinstance(s, bool) for s in items):
        return [], [int(cast(int, s)) for s in items]
    raise InvalidInput("sampling_params.stop", "must be strings or token ids, not a mix")


def _tensor(value: object) -> TensorData | None:
    if value is None or isinstance(value, TensorData):
        return value
    try:
        return TensorData.model_validate(value)
    except ValidationError as exc:
        raise InvalidInput("target_prompt_logprobs", f"is not a TensorData ({exc})") from exc


def target_ids(td: TensorData) -> np.ndarray:
    """The dense ``[rows, K]`` int64 ids of a ``target_prompt_logprobs`` tensor; a sparse
    tensor's unlisted cells are -1 (nothing asked)."""
    if td.shape is None or len(td.shape) != 2:
        raise InvalidInput("target_prompt_logprobs", f"must be 2-D, got shape {td.shape}")
    values = np.asarray(td.data, dtype=np.int64)
    if not td.is_sparse:
        return values.reshape(td.shape)
    dense = np.full(td.shape, -1, dtype=np.int64)
    rows = np.repeat(np.arange(td.shape[0]), np.diff(td.sparse_crow_indices or [0]))
    dense[rows, np.asarray(td.sparse_col_indices, dtype=np.int64)] = values
    return dense


def validate_job(job: SampleJob, vocab_size: int, context_length: int, where: str = "") -> int:
    """Check a job against the base model; returns its effective max_tokens."""
    n = len(job.prompt)
    if n == 0:
        raise InvalidInput(f"{where}prompt", "is empty")
    bad = [t for t in job.prompt if not 0 <= t < vocab_size]
    if bad:
        raise InvalidInput(
            f"{where}prompt", f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})"
        )
    if not 1 <= job.num_samples <= MAX_NUM_SAMPLES:
        raise InvalidInput(
            f"{where}num_samples", f"{job.num_samples} is outside [1, {MAX_NUM_SAMPLES}]"
        )
    max_tokens = _check_length(job, n, context_length, where)
    _check_drawing(job, vocab_size, where)
    _check_reports(job, vocab_size, context_length, where)
    return max_tokens


def _check_length(job: SampleJob, n: int, context_length: int, where: str) -> int:
    room = context_length - n
    max_tokens = room if job.max_tokens is None else job.max_tokens
    field_name = f"{where}sampling_params.max_tokens"
    if max_tokens <= 0:
        raise InvalidInput(field_name, f"{max_tokens} must be ≥ 1")
    if max_tokens > room:
        raise InvalidInput(
            field_name,
            f"prompt ({n}) + max_tokens ({max_tokens}) exceeds the context length {context_length}",
        )
    return max_tokens


def _check_drawing(job: SampleJob, vocab_size: int, where: str) -> None:
    params = f"{where}sampling_params"
    if not (math.isfinite(job.temperature) and job.temperature >= 0):
        raise InvalidInput(f"{params}.temperature", f"{job.temperature} must be finite and ≥ 0")
    if job.top_k < -1:
        raise InvalidInput(f"{params}.top_k", f"{job.top_k} must be -1 (off) or ≥ 1")
    if not (math.isfinite(job.top_p) and 0 < job.top_p <= 1):
        raise InvalidInput(f"{params}.top_p", f"{job.top_p} must be in (0, 1]")
    if any(not 0 <= t < vocab_size for t in job.stop_tokens or []):
        raise InvalidInput(f"{params}.stop", "stop token ids must be inside the vocabulary")
    if any(s == "" for s in job.stop_strings):
        raise InvalidInput(f"{params}.stop", "stop strings must not be empty")
    job.controls.check(vocab_size, where)


def _check_reports(job: SampleJob, vocab_size: int, context_length: int, where: str) -> None:
    """What the job asks to be reported besides its samples."""
    n = len(job.prompt)
    if not 0 <= job.topk_prompt_logprobs <= MAX_TOPK_PROMPT_LOGPROBS:
        raise InvalidInput(
            f"{where}topk_prompt_logprobs", f"must be in [0, {MAX_TOPK_PROMPT_LOGPROBS}]"
        )
    if not 0 <= job.topk_logprobs <= MAX_TOPK_LOGPROBS:
        raise InvalidInput(f"{where}topk_sample_logprobs", f"must be in [0, {MAX_TOPK_LOGPROBS}]")
    last_n = job.prompt_logprobs_last_n
    if last_n is not None:
        if not job.prompt_logprobs:
            raise InvalidInput(f"{where}prompt_logprobs_last_n", "requires prompt_logprobs")
        if not 1 <= last_n <= n - 1:
            raise InvalidInput(
                f"{where}prompt_logprobs_last_n",
                f"{last_n} is outside [1, len(prompt) - 1 = {n - 1}]",
            )
    # Scoring cost is len(prompt) × width; each width is bounded as a top-k width is.
    budget = context_length * MAX_TOPK_PROMPT_LOGPROBS
    if job.prompt_alt_tokens_k < 0 or n * job.prompt_alt_tokens_k > budget:
        raise InvalidInput(
            f"{where}prompt_alt_tokens_k",
            f"{job.prompt_alt_tokens_k} must be ≥ 0 with len(prompt) × k ≤ {budget}",
        )
    if job.target_prompt_logprobs is not None:
        _check_target(job.target_prompt_logprobs, n, vocab_size, budget, where)


def _check_target(td: TensorData, n: int, vocab_size: int, budget: int, where: str) -> None:
    name = f"{where}target_prompt_logprobs"
    if td.dtype != "int64":
        raise InvalidInput(name, f"must be an int64 tensor of token ids, got {td.dtype}")
    ids = target_ids(td)
    if ids.shape[0] != n - 1:
        raise InvalidInput(name, f"has {ids.shape[0]} rows, expected len(prompt) - 1 = {n - 1}")
    asked = ids[ids != -1]
    if asked.size == 0:
        raise InvalidInput(name, "names no token id (every cell is -1)")
    if asked.min() < 0 or asked.max() >= vocab_size:
        bad = int(asked[(asked < 0) | (asked >= vocab_size)][0])
        raise InvalidInput(name, f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    distinct = int(np.unique(asked).size)
    if n * distinct > budget:
        raise InvalidInput(
            name, f"len(prompt) × distinct ids = {n} × {distinct} exceeds the limit {budget}"
        )
