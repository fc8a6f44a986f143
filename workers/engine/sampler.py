"""Batched sampling with a KV cache for many requests on one adapter.

Each distinct prompt is prefilled once, its cache rows repeated for its samples; decoding runs
all rows in one batch and drops finished rows from the cache. The returned logprob of a token is
its log-probability under the distribution it was drawn from (temperature, top-k and top-p
applied); at temperature 1 with no truncation that equals the trainer's ``forward`` logprob.
Greedy decoding (temperature 0) reports the model's untempered logprob. On request, each step
also reports the k most likely tokens under that same distribution (tokens it could not draw,
removed by top-k/top-p, are left out). What a request asks about its prompt comes from the same
prefill (``prompt_scoring``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from loopwright.types import StopReason

from .prompt_scoring import (
    PromptScores,
    TopK,
    alternatives_generator,
    asks_about_prompt,
    positions_needed,
    score_prompt,
)
from .sample_job import SAMPLE_OPTIONS, SampleJob, validate_job
from .sample_result import SampledSeq, SampleResult

__all__ = ["SAMPLE_OPTIONS", "SampleJob", "SampleResult", "SampledSeq", "Sampler"]


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
        return validate_job(job, self.vocab_size, self.context_length, where)

    # -- sampling --------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, jobs: Sequence[SampleJob]) -> list[SampleResult]:
        prefix = len(jobs) > 1
        limits = [self.validate(j, f"requests[{i}]." if prefix else "") for i, j in enumerate(jobs)]
        if not jobs:
            return []
        cache = DynamicCache()
        last_logits_J_V, prompt_scores, mask_J_L = self._prefill(jobs, cache)
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
            results.append(SampleResult(seqs, prompt_scores[j]))
        return results

    def _prefill(
        self, jobs: Sequence[SampleJob], cache: DynamicCache
    ) -> tuple[torch.Tensor, list[PromptScores], torch.Tensor]:
        """Left-padded prefill of each job's prompt; returns last-position logits, what each job
        asked about its prompt, and the attention mask. Only the trailing positions some job
        needs come out of the unembedding (left padding aligns every prompt's end)."""
        longest = max(len(j.prompt) for j in jobs)
        ids = torch.zeros(len(jobs), longest, dtype=torch.long)
        mask = torch.zeros(len(jobs), longest, dtype=torch.long)
        for i, job in enumerate(jobs):
            ids[i, longest - len(job.prompt) :] = torch.tensor(job.prompt)
            mask[i, longest - len(job.prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        needed = [positions_needed(job) for job in jobs]
        keep = max(needed)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        logits_J_K_V = out.logits
        scores = [
            score_prompt(
                job, logits_J_K_V[i, keep - need :], alternatives_generator(job, self.device)
            )
            if asks_about_prompt(job)
            else PromptScores()
            for i, (job, need) in enumerate(zip(jobs, needed, strict=True))
        ]
        return logits_J_K_V[:, -1].float(), scores, mask

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
