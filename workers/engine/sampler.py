"""Batched sampling with a KV cache for many requests on one adapter.

Each distinct prompt is prefilled once, its cache rows repeated for its samples; decoding runs
all rows in one batch and drops finished rows from the cache. The returned logprob of a token is
its log-probability under the distribution it was drawn from (temperature, top-k and top-p
applied); at temperature 1 with no truncation that equals the trainer's ``forward`` logprob.
Greedy decoding (temperature 0) reports the model's untempered logprob. On request, each step
also reports the k most likely tokens under that same distribution (tokens it could not draw,
removed by top-k/top-p, are left out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from loopwright.types import SampledSequence, SampleResponse, SamplingParams, StopReason

from .errors import InvalidInput

MAX_NUM_SAMPLES = 128
MAX_TOPK_PROMPT_LOGPROBS = 64
MAX_TOPK_LOGPROBS = 20


@dataclass
class SampleJob:
    """One sampling request: a prompt, how many samples, and how to draw them."""

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

    @classmethod
    def from_wire(
        cls,
        prompt: Sequence[int],
        num_samples: int,
        params: SamplingParams,
        *,
        prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_logprobs: int = 0,
    ) -> SampleJob:
        stop = params.stop
        strings: list[str] = []
        tokens: list[int] | None = None
        if isinstance(stop, str):
            strings = [stop]
        elif stop is not None:
            items = list(stop)
            if not items:
                tokens = []  # an explicit empty list: no stop at all, not even end-of-sequence
            elif all(isinstance(s, str) for s in items):
                strings = [str(s) for s in items]
            elif all(isinstance(s, int) and not isinstance(s, bool) for s in items):
                tokens = [int(cast(int, s)) for s in items]
            else:
                raise InvalidInput(
                    "sampling_params.stop", "must be strings or token ids, not a mix"
                )
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
            prompt_logprobs=bool(prompt_logprobs),
            topk_prompt_logprobs=int(topk_prompt_logprobs or 0),
            topk_logprobs=int(topk_logprobs or 0),
        )


TopK = list[tuple[int, float]]  # (token id, logprob), most likely first


@dataclass
class SampledSeq:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: StopReason
    topk_logprobs: list[TopK] | None = None  # per generated token, when the job asked for them


@dataclass
class SampleResult:
    sequences: list[SampledSeq]
    prompt_logprobs: list[float | None] | None = None
    topk_prompt_logprobs: list[list[tuple[int, float]] | None] | None = None

    def to_response(self) -> SampleResponse:
        return SampleResponse(
            sequences=[
                SampledSequence(tokens=s.tokens, logprobs=s.logprobs, stop_reason=s.stop_reason)
                for s in self.sequences
            ],
            prompt_logprobs=self.prompt_logprobs,
            topk_prompt_logprobs=self.topk_prompt_logprobs,
        )

    def to_wire(self) -> dict:
        """The JSON result: the wire ``SampleResponse``, plus each sequence's ``topk_logprobs``
        (``[[token, logprob], ...]`` per token) when they were asked for."""
        wire = self.to_response().model_dump(mode="json")
        for seq, out in zip(self.sequences, wire["sequences"], strict=True):
            if seq.topk_logprobs is not None:
                out["topk_logprobs"] = [[[t, lp] for t, lp in step] for step in seq.topk_logprobs]
        return wire

    @property
    def sampled_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.sequences)


@dataclass
class _Row:
    job: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None
    topk: list[TopK] | None = None


class Sampler:
    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        vocab_size: int,
        context_length: int,
        device: torch.device,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.device = device
        eos = tokenizer.eos_token_id
        self.default_stop = [] if eos is None else [int(eos)]

    # -- validation ------------------------------------------------------------------------
    def validate(self, job: SampleJob, where: str = "") -> int:
        """Check a job; returns its effective max_tokens."""
        n = len(job.prompt)
        if n == 0:
            raise InvalidInput(f"{where}prompt", "is empty")
        bad = [t for t in job.prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidInput(
                f"{where}prompt",
                f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})",
            )
        if not 1 <= job.num_samples <= MAX_NUM_SAMPLES:
            raise InvalidInput(
                f"{where}num_samples", f"{job.num_samples} is outside [1, {MAX_NUM_SAMPLES}]"
            )
        room = self.context_length - n
        max_tokens = room if job.max_tokens is None else job.max_tokens
        if max_tokens <= 0:
            raise InvalidInput(f"{where}sampling_params.max_tokens", f"{max_tokens} must be ≥ 1")
        if max_tokens > room:
            raise InvalidInput(
                f"{where}sampling_params.max_tokens",
                f"prompt ({n}) + max_tokens ({max_tokens}) exceeds the context length {self.context_length}",
            )
        if not (math.isfinite(job.temperature) and job.temperature >= 0):
            raise InvalidInput(
                f"{where}sampling_params.temperature", f"{job.temperature} must be finite and ≥ 0"
            )
        if job.top_k < -1:
            raise InvalidInput(
                f"{where}sampling_params.top_k", f"{job.top_k} must be -1 (off) or ≥ 1"
            )
        if not (math.isfinite(job.top_p) and 0 < job.top_p <= 1):
            raise InvalidInput(f"{where}sampling_params.top_p", f"{job.top_p} must be in (0, 1]")
        stops = job.stop_tokens or []
        if any(not 0 <= t < self.vocab_size for t in stops):
            raise InvalidInput(
                f"{where}sampling_params.stop", "stop token ids must be inside the vocabulary"
            )
        if any(s == "" for s in job.stop_strings):
            raise InvalidInput(f"{where}sampling_params.stop", "stop strings must not be empty")
        if not 0 <= job.topk_prompt_logprobs <= MAX_TOPK_PROMPT_LOGPROBS:
            raise InvalidInput(
                f"{where}topk_prompt_logprobs", f"must be in [0, {MAX_TOPK_PROMPT_LOGPROBS}]"
            )
        if not 0 <= job.topk_logprobs <= MAX_TOPK_LOGPROBS:
            raise InvalidInput(f"{where}topk_logprobs", f"must be in [0, {MAX_TOPK_LOGPROBS}]")
        return max_tokens

    # -- sampling --------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, jobs: Sequence[SampleJob]) -> list[SampleResult]:
        prefix = len(jobs) > 1
        limits = [self.validate(j, f"requests[{i}]." if prefix else "") for i, j in enumerate(jobs)]
        if not jobs:
            return []
        cache = DynamicCache()
        last_logits_J_V, prompt_info, mask_J_L = self._prefill(jobs, cache)
        row_job = [j for j, job in enumerate(jobs) for _ in range(job.num_samples)]
        index = torch.tensor(row_job, device=self.device)
        cache.batch_select_indices(index)
        logits_R_V = last_logits_J_V[index]
        mask_R_L = mask_J_L[index]
        positions_R = mask_R_L.sum(-1) - 1
        rows = [_Row(job=j, topk=[] if jobs[j].topk_logprobs else None) for j in row_job]
        generators = [self._generator(job) for job in jobs]
        active = list(range(len(rows)))
        while True:
            row_jobs = [rows[r].job for r in active]
            tokens, logps, tops = self._draw(logits_R_V, row_jobs, jobs, generators)
            for pos, r in enumerate(active):
                row = rows[r]
                if row.topk is not None:
                    row.topk.append(tops[pos])
                self._append(row, tokens[pos], logps[pos], jobs[row.job], limits[row.job])
            keep = [pos for pos, r in enumerate(active) if rows[r].stop_reason is None]
            if not keep:
                break
            if len(keep) < len(active):
                keep_t = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(keep_t)
                mask_R_L, positions_R = mask_R_L[keep_t], positions_R[keep_t]
                tokens = [tokens[p] for p in keep]
                active = [active[p] for p in keep]
            mask_R_L = torch.cat([mask_R_L, mask_R_L.new_ones(len(active), 1)], dim=1)
            positions_R = positions_R + 1
            out = self.model(
                input_ids=torch.tensor(tokens, device=self.device).unsqueeze(1),
                attention_mask=mask_R_L,
                position_ids=positions_R.unsqueeze(1),
                cache=cache,
                use_cache=True,
            )
            logits_R_V = out.logits[:, -1].float()
        results = []
        for j, _job in enumerate(jobs):
            seqs = [
                SampledSeq(r.tokens, r.logprobs, r.stop_reason or "length", r.topk)
                for r in rows
                if r.job == j
            ]
            plp, topk = prompt_info[j]
            results.append(SampleResult(seqs, plp, topk))
        return results

    def _prefill(self, jobs: Sequence[SampleJob], cache: DynamicCache):
        """Left-padded prefill of each job's prompt; returns last-position logits and prompt logprobs."""
        longest = max(len(j.prompt) for j in jobs)
        ids = torch.zeros(len(jobs), longest, dtype=torch.long)
        mask = torch.zeros(len(jobs), longest, dtype=torch.long)
        for i, job in enumerate(jobs):
            ids[i, longest - len(job.prompt) :] = torch.tensor(job.prompt)
            mask[i, longest - len(job.prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        need_all = any(j.prompt_logprobs or j.topk_prompt_logprobs for j in jobs)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=0 if need_all else 1,
        )
        logits = out.logits
        info: list[tuple[list[float | None] | None, list | None]] = []
        for i, job in enumerate(jobs):
            if not (job.prompt_logprobs or job.topk_prompt_logprobs):
                info.append((None, None))
                continue
            n = len(job.prompt)
            lp_N_V = torch.log_softmax(logits[i, longest - n : longest - 1].float(), dim=-1)
            targets = torch.tensor(job.prompt[1:], device=self.device)
            plp: list[float | None] = [
                None,
                *lp_N_V.gather(-1, targets.unsqueeze(-1)).squeeze(-1).tolist(),
            ]
            topk = None
            if job.topk_prompt_logprobs:
                vals, idx = lp_N_V.topk(job.topk_prompt_logprobs, dim=-1)
                topk = [
                    None,
                    *[
                        list(zip(ix, vs, strict=True))
                        for ix, vs in zip(idx.tolist(), vals.tolist(), strict=True)
                    ],
                ]
            info.append((plp if job.prompt_logprobs else None, topk))
        return logits[:, -1].float(), info, mask

    def _generator(self, job: SampleJob) -> torch.Generator:
        g = torch.Generator(device=self.device)
        if job.seed is not None:
            g.manual_seed(int(job.seed))
        else:
            g.seed()
        return g

    def _draw(
        self,
        logits_R_V: torch.Tensor,
        row_jobs: list[int],
        jobs: Sequence[SampleJob],
        gens: list[torch.Generator],
    ):
        """Pick one token per row; returns tokens, their logprobs under the sampling law and,
        for rows whose job asks, the most likely tokens under that law."""
        dev = logits_R_V.device
        temps = torch.tensor([jobs[j].temperature for j in row_jobs], device=dev)
        greedy = temps == 0
        scaled = logits_R_V / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(-1)
        scaled = self._truncate(scaled, row_jobs, jobs)
        logp_R_V = torch.log_softmax(scaled, dim=-1)
        tokens = torch.empty(len(row_jobs), dtype=torch.long, device=dev)
        by_job: dict[int, list[int]] = {}
        for pos, j in enumerate(row_jobs):
            by_job.setdefault(j, []).append(pos)
        for j, positions in by_job.items():
            idx = torch.tensor(positions, device=dev)
            if jobs[j].temperature == 0:
                tokens[idx] = logits_R_V[idx].argmax(-1)
            else:
                tokens[idx] = _inverse_cdf(logp_R_V[idx], gens[j])
        if bool(greedy.any()):
            raw = torch.log_softmax(logits_R_V, dim=-1)
            logp_R_V = torch.where(greedy.unsqueeze(-1), raw, logp_R_V)
        picked = logp_R_V.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return tokens.tolist(), picked.tolist(), _top_logprobs(logp_R_V, row_jobs, jobs)

    @staticmethod
    def _truncate(
        scaled_R_V: torch.Tensor, row_jobs: list[int], jobs: Sequence[SampleJob]
    ) -> torch.Tensor:
        """Top-k then top-p (nucleus) filtering, per row; removed tokens get -inf."""
        ks = [jobs[j].top_k for j in row_jobs]
        ps = [jobs[j].top_p for j in row_jobs]
        vocab = scaled_R_V.shape[-1]
        if all(k in (-1, 0) or k >= vocab for k in ks) and all(p >= 1.0 for p in ps):
            return scaled_R_V
        dev = scaled_R_V.device
        sorted_vals, sorted_idx = scaled_R_V.sort(dim=-1, descending=True)
        rank = torch.arange(vocab, device=dev).unsqueeze(0)
        k_t = torch.tensor([k if k > 0 else vocab for k in ks], device=dev).unsqueeze(-1)
        remove = rank >= k_t
        sorted_vals = sorted_vals.masked_fill(remove, float("-inf"))
        probs = torch.softmax(sorted_vals, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly before each token
        p_t = torch.tensor(ps, device=dev, dtype=probs.dtype).unsqueeze(-1)
        remove = remove | (before >= p_t)
        remove[:, 0] = False  # the most likely token always survives
        out = torch.full_like(scaled_R_V, float("-inf"))
        return out.scatter(-1, sorted_idx, sorted_vals.masked_fill(remove, float("-inf")))

    def _append(self, row: _Row, token: int, logprob: float, job: SampleJob, limit: int) -> None:
        row.tokens.append(int(token))
        row.logprobs.append(float(logprob))
        stops = self.default_stop if job.stop_tokens is None else job.stop_tokens
        if token in stops or (
            job.stop_strings and self._hit_stop_string(row.tokens, job.stop_strings)
        ):
            row.stop_reason = "stop"
        elif len(row.tokens) >= limit:
            row.stop_reason = "length"

    def _hit_stop_string(self, tokens: list[int], stops: list[str]) -> bool:
        # The newest token can complete a stop string that started several tokens back.
        window = max(len(s) for s in stops) + 8
        text = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(s in text for s in stops)


def _top_logprobs(
    logp_R_V: torch.Tensor, row_jobs: list[int], jobs: Sequence[SampleJob]
) -> list[TopK]:
    """Per row, its job's ``topk_logprobs`` most likely tokens (empty if none are asked for);
    tokens of probability 0 (removed by top-k/top-p) are left out."""
    k = min(max(jobs[j].topk_logprobs for j in row_jobs), logp_R_V.shape[-1])
    if k <= 0:
        return [[] for _ in row_jobs]
    values_R_K, ids_R_K = logp_R_V.topk(k, dim=-1)
    return [
        [(t, v) for t, v in zip(ids[: jobs[j].topk_logprobs], vals, strict=False) if v > -math.inf]
        for j, ids, vals in zip(row_jobs, ids_R_K.tolist(), values_R_K.tolist(), strict=True)
    ]


def _inverse_cdf(logp_N_V: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row from its distribution: a single uniform per row, not one per token.

    ``1 - u`` lies in (0, 1], so the pick lands on a token of non-zero probability: a token
    removed by top-k/top-p (probability exactly 0) can never be chosen.
    """
    cdf_N_V = logp_N_V.exp().cumsum(-1)
    u_N = torch.rand(
        logp_N_V.shape[0], 1, generator=generator, device=logp_N_V.device, dtype=cdf_N_V.dtype
    )
    picked = torch.searchsorted(cdf_N_V, (1 - u_N) * cdf_N_V[:, -1:])
    return picked.squeeze(-1).clamp_(max=logp_N_V.shape[-1] - 1)
