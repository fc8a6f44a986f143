"""What a sample request asks about its prompt, computed from the prefill's logits.

Prompt logprobs (all, or the last n), their top-k, the logprobs of given target ids, and tokens
drawn at every prompt position. All are the model's untempered log-probabilities, as the
trainer's ``forward`` computes them; only the alternative tokens are drawn at the temperature.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from loopwright.types import TensorData

from .sample_job import SampleJob, target_ids

TopK = list[tuple[int, float]]  # (token id, logprob), most likely first


@dataclass
class PromptScores:
    """Per prompt position (entry ``i`` is prompt token ``i``; None where not scored)."""

    prompt_logprobs: list[float | None] | None = None
    topk_prompt_logprobs: list[TopK | None] | None = None
    target_prompt_logprobs: TensorData | None = None
    prompt_alt_tokens: tuple[TensorData, TensorData] | None = None  # tokens, logprobs


def asks_about_prompt(job: SampleJob) -> bool:
    return bool(
        job.prompt_logprobs
        or job.topk_prompt_logprobs
        or job.target_prompt_logprobs is not None
        or job.prompt_alt_tokens_k
    )


def positions_needed(job: SampleJob) -> int:
    """How many trailing prompt positions' logits the job needs (the last one always: it
    predicts the first sampled token)."""
    n = len(job.prompt)
    need = 1
    if job.prompt_logprobs or job.topk_prompt_logprobs:
        last_n = job.prompt_logprobs_last_n
        need = max(need, n if last_n is None else last_n + 1)
    if job.target_prompt_logprobs is not None:
        # Rows before the first that names an id are not scored.
        named = np.flatnonzero((target_ids(job.target_prompt_logprobs) != -1).any(axis=1))
        need = max(need, n - int(named[0]))
    if job.prompt_alt_tokens_k:
        need = n
    return need


def score_prompt(
    job: SampleJob, logits_M_V: torch.Tensor, generator: torch.Generator
) -> PromptScores:
    """Scores from the logits of the job's last ``positions_needed(job)`` prompt positions."""
    n, m = len(job.prompt), logits_M_V.shape[0]
    first = n - m  # the prompt position of logits row 0
    # Row r: log-probabilities at prompt position first + r, i.e. of prompt token first + r + 1.
    lp_S_V = torch.log_softmax(logits_M_V[: m - 1].float(), dim=-1)
    scores = PromptScores()
    if job.prompt_logprobs or job.topk_prompt_logprobs:
        _score_tokens(job, lp_S_V, first, scores)
    if job.target_prompt_logprobs is not None:
        scores.target_prompt_logprobs = _score_targets(job.target_prompt_logprobs, lp_S_V, first)
    if job.prompt_alt_tokens_k:
        scores.prompt_alt_tokens = _draw_alternatives(job, logits_M_V, lp_S_V, generator)
    return scores


def _score_tokens(job: SampleJob, lp_S_V: torch.Tensor, first: int, out: PromptScores) -> None:
    n = len(job.prompt)
    start = 1 if job.prompt_logprobs_last_n is None else n - job.prompt_logprobs_last_n
    rows_R_V = lp_S_V[start - 1 - first :]
    unscored: list[None] = [None] * start
    if job.prompt_logprobs:
        targets_R = torch.tensor(job.prompt[start:], dtype=torch.long, device=rows_R_V.device)
        picked = rows_R_V.gather(-1, targets_R.unsqueeze(-1)).squeeze(-1).tolist()
        out.prompt_logprobs = [*unscored, *picked]
    if job.topk_prompt_logprobs:
        values_R_K, ids_R_K = rows_R_V.topk(job.topk_prompt_logprobs, dim=-1)
        tops: list[TopK] = [
            list(zip(ids, vals, strict=True))
            for ids, vals in zip(ids_R_K.tolist(), values_R_K.tolist(), strict=True)
        ]
        out.topk_prompt_logprobs = [*unscored, *tops]


def _score_targets(td: TensorData, lp_S_V: torch.Tensor, first: int) -> TensorData:
    """Logprob of every named cell (row i scores prompt position i + 1), 0.0 where -1; the
    answer has the request's shape and layout."""
    ids_R_K = target_ids(td)
    values_R_K = np.zeros(ids_R_K.shape, dtype=np.float32)
    ids = torch.from_numpy(ids_R_K[first:]).to(lp_S_V.device)  # rows before `first` name none
    scored = lp_S_V.gather(-1, ids.clamp(min=0)).masked_fill(ids == -1, 0.0)
    values_R_K[first:] = scored.cpu().numpy()
    if not td.is_sparse:
        return TensorData.from_numpy(values_R_K)
    crow = td.sparse_crow_indices or [0]
    rows = np.repeat(np.arange(ids_R_K.shape[0]), np.diff(crow))
    cols = np.asarray(td.sparse_col_indices, dtype=np.int64)
    return TensorData(
        data=values_R_K[rows, cols].tolist(),
        dtype="float32",
        shape=list(ids_R_K.shape),
        sparse_crow_indices=list(crow),
        sparse_col_indices=cols.tolist(),
    )


def _draw_alternatives(
    job: SampleJob, logits_M_V: torch.Tensor, lp_S_V: torch.Tensor, generator: torch.Generator
) -> tuple[TensorData, TensorData]:
    """k independent draws (with replacement) at the job's temperature from the distribution at
    every prompt position but the last; temperature 0 repeats the most likely token."""
    k, rows = job.prompt_alt_tokens_k, lp_S_V.shape[0]
    if rows == 0:
        empty = np.zeros((0, k), dtype=np.int64)
        return TensorData.from_numpy(empty), TensorData.from_numpy(empty.astype(np.float32))
    if job.temperature == 0:
        ids_R_K = lp_S_V.argmax(-1, keepdim=True).expand(rows, k)
    else:
        probs_R_V = torch.softmax(logits_M_V[:rows].float() / job.temperature, dim=-1)
        ids_R_K = torch.multinomial(probs_R_V, k, replacement=True, generator=generator)
    logprobs_R_K = lp_S_V.gather(-1, ids_R_K)
    return TensorData.from_torch(ids_R_K), TensorData.from_torch(logprobs_R_K)


def alternatives_generator(job: SampleJob, device: torch.device) -> torch.Generator:
    """A stream of its own, so asking for alternatives never changes the sampled tokens."""
    g = torch.Generator(device=device)
    if job.seed is None:
        g.seed()
    else:
        g.manual_seed((int(job.seed) * 0x9E3779B97F4A7C15 + 1) % (1 << 63))
    return g
