"""Continuous-batching sampling with a KV cache for many requests of many adapters at once.

Requests join the running batch as room frees (a row and KV-token budget) and each sequence
leaves it as soon as it stops. The samples of one request share its prompt's prefill (the prompt
is computed once and its cache rows repeated: ``prompt_cache_hit_tokens``). Every row decodes
through its own adapter (``mixed_lora``). Each sequence's randomness is its own: the uniform
behind its t-th token is a counter-based hash of (seed, sample index, t), so a seeded sample is
the same whatever else runs beside it. Logits processors and grammars (``logits_processors``)
act on each row alone. The returned logprob of a token is by default its log-probability under
the distribution it was drawn from (processors, temperature, min-p, top-k and top-p applied); at
temperature 1 with nothing else applied that equals the trainer's ``forward`` logprob, and a job
may ask for the model's own law instead, or for both. Greedy decoding (temperature 0) reports
the untempered logprob after the processors. On request, each step also reports the k most likely
tokens under the reported law (tokens it could not draw are left out). What a request asks about
its prompt comes from the same prefill (``prompt_scoring``).
"""

from __future__ import annotations

import math
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from loopwright.types import StopReason

from .constrained import Grammars
from .errors import InvalidInput
from .logits_processors import Processors
from .mixed_lora import LoRARouter, RowPlan
from .prompt_scoring import (
    PromptScores,
    TopK,
    alternatives_generator,
    asks_about_prompt,
    positions_needed,
    score_prompt,
)
from .sample_job import SAMPLE_OPTIONS, SampleJob, validate_job
from .sample_result import SampledSeq, SampledToken, SampleResult, TokenSink
from .vision import VisionInputs, concat_pixels, image_count, pixels_to

__all__ = [
    "SAMPLE_OPTIONS",
    "SampleJob",
    "SampleResult",
    "SampledSeq",
    "SampledToken",
    "Sampler",
    "TokenSink",
]


@dataclass
class _Row:
    job: int
    sample: int  # index among its request's samples
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None
    topk: list[TopK] | None = None
    model_logprobs: list[float] | None = None


@dataclass
class _Running:
    """The rows being decoded, their left-padded KV cache and attention mask, each row's last
    position and the token it feeds next."""

    rows: list[_Row]
    cache: DynamicCache
    mask_R_L: torch.Tensor
    positions_R: torch.Tensor
    feed: list[int]


class Sampler:
    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        vocab_size: int,
        context_length: int,
        device: torch.device,
        router: LoRARouter | None = None,
        max_rows: int = 256,
        max_tokens: int = 65536,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.device = device
        self.router = router or LoRARouter(model)
        self.max_rows = max_rows  # rows decoded together
        self.max_tokens = max_tokens  # padded KV positions held, and prefilled in one pass
        eos = tokenizer.eos_token_id
        self.default_stop = [] if eos is None else [int(eos)]
        self.grammars = Grammars(tokenizer, vocab_size)
        # A vision-language base: prompts may hold images (None: token chunks only).
        self.vision: VisionInputs | None = None

    # -- validation ------------------------------------------------------------------------
    def validate(self, job: SampleJob, where: str = "") -> int:
        """Check a job; returns its effective max_tokens. A prompt with images is expanded
        here (its image tokens into ``prompt``, its pixels into ``pixels``)."""
        self._expand_images(job, where)
        limit = validate_job(job, self.vocab_size, self.context_length, where)
        self.grammars.check(job.controls.structure, f"{where}sampling_params")
        return limit

    def _expand_images(self, job: SampleJob, where: str) -> None:
        if self.vision is None:
            if job.prompt_input is not None:
                raise InvalidInput(
                    f"{where}prompt", "holds images; this base model reads token chunks only"
                )
            return
        if job.prompt_input is not None:
            expanded = self.vision.expand(job.prompt_input, f"{where}prompt")
            job.prompt, job.pixels, job.prompt_input = expanded.tokens, expanded.pixels, None
        elif job.pixels is None and self.vision.image_token_id in job.prompt:
            i = job.prompt.index(self.vision.image_token_id)
            raise InvalidInput(
                f"{where}prompt",
                f"token {self.vision.image_token_id} at position {i} is the image token; "
                "send the image as an image chunk",
            )

    # -- sampling --------------------------------------------------------------------------
    @torch.no_grad()
    def run(
        self,
        jobs: Sequence[SampleJob],
        adapters: Sequence[str | None] | None = None,
        on_tokens: TokenSink | None = None,
    ) -> list[SampleResult]:
        """Sample every job, job ``i`` through peft adapter ``adapters[i]`` (None: the base
        model, also when ``adapters`` is None). Every job is checked before anything runs.

        ``on_tokens``: told each step's new tokens, every sequence's in order of position, as
        they are drawn (what it is told is what the results hold); it must not raise."""
        prefix = len(jobs) > 1
        limits = [self.validate(j, f"requests[{i}]." if prefix else "") for i, j in enumerate(jobs)]
        if not jobs:
            return []
        names: list[str | None] = [None] * len(jobs) if adapters is None else list(adapters)
        with self.router.frozen():
            return _Run(self, jobs, names, limits, on_tokens).results()

    def _prefill(
        self, jobs: Sequence[SampleJob], adapters: Sequence[str | None], cache: DynamicCache
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
        pixels = concat_pixels([job.pixels for job in jobs])
        dtype = getattr(self.model, "dtype", torch.float32)
        images = [image_count(job.pixels) for job in jobs]
        with self.router.rows(RowPlan.of(adapters, self.device, images)):
            out = self.model(
                **pixels_to(pixels, self.device, dtype),
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

    def _draw(self, logits_R_V: torch.Tensor, rows: Sequence[_Row], run: _Run):
        """Pick one token per row; returns tokens, their logprobs under the law each job reports,
        for rows whose job asks the most likely tokens under that law, and for jobs that ask
        for both laws the model's own logprobs."""
        jobs = run.jobs
        row_jobs = [r.job for r in rows]
        dev = logits_R_V.device
        processed_R_V = run.processors.before_temperature(logits_R_V, rows)
        temps = torch.tensor([jobs[j].temperature for j in row_jobs], device=dev)
        greedy = temps == 0
        scaled = processed_R_V / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(-1)
        scaled = run.processors.after_temperature(scaled, rows)
        scaled = self._truncate(scaled, row_jobs, jobs)
        logp_R_V = torch.log_softmax(scaled, dim=-1)
        u_R = uniforms(
            [run.seeds[r.job] for r in rows],
            [r.sample for r in rows],
            [len(r.tokens) for r in rows],
        )
        tokens = _inverse_cdf(logp_R_V, torch.from_numpy(u_R).to(dev))
        if bool(greedy.any()):
            tokens = torch.where(greedy, processed_R_V.argmax(-1), tokens)
            untempered = torch.log_softmax(processed_R_V, dim=-1)
            logp_R_V = torch.where(greedy.unsqueeze(-1), untempered, logp_R_V)
        laws = [jobs[j].controls.logprobs_of for j in row_jobs]
        model_R = None
        if any(law != "sampled" for law in laws):
            model_R_V = torch.log_softmax(logits_R_V, dim=-1)
            own = torch.tensor([law == "model" for law in laws], device=dev)
            logp_R_V = torch.where(own.unsqueeze(-1), model_R_V, logp_R_V)
            model_R = model_R_V.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).tolist()
        picked = logp_R_V.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        tops = _top_logprobs(logp_R_V, row_jobs, jobs)
        return tokens.tolist(), picked.tolist(), tops, model_R

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


def _inverse_cdf(logp_N_V: torch.Tensor, u_N: torch.Tensor) -> torch.Tensor:
    """One draw per row from its distribution, given one uniform in [0, 1) per row.

    ``1 - u`` lies in (0, 1], so the pick lands on a token of non-zero probability: a token
    removed by top-k/top-p (probability exactly 0) can never be chosen.
    """
    cdf_N_V = logp_N_V.exp().cumsum(-1)
    target = (1 - u_N.to(cdf_N_V.dtype)).unsqueeze(-1) * cdf_N_V[:, -1:]
    picked = torch.searchsorted(cdf_N_V, target)
    return picked.squeeze(-1).clamp_(max=logp_N_V.shape[-1] - 1)


_M64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 arrays (wrapping arithmetic is intended)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(seeds: Sequence[int], samples: Sequence[int], steps: Sequence[int]) -> np.ndarray:
    """The uniform in [0, 1) of each (seed, sample index, token index): a hash, no state."""
    with np.errstate(over="ignore"):
        key = _mix(np.array([s & _M64 for s in seeds], dtype=np.uint64))
        key = _mix(key ^ np.array(samples, dtype=np.uint64))
        key = _mix(key ^ np.array(steps, dtype=np.uint64))
    return (key >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class _Run:
    """One ``Sampler.run``: admits jobs as room frees, decodes, and collects the results."""

    def __init__(
        self,
        sampler: Sampler,
        jobs: Sequence[SampleJob],
        adapters: list[str | None],
        limits: list[int],
        on_tokens: TokenSink | None = None,
    ) -> None:
        self.s = sampler
        self.on_tokens = on_tokens
        self.jobs = jobs
        self.adapters = adapters
        self.limits = limits
        self.seeds = [secrets.randbits(63) if j.seed is None else int(j.seed) for j in jobs]
        self.processors = Processors(
            [j.controls for j in jobs],
            [j.prompt for j in jobs],
            sampler.vocab_size,
            sampler.device,
            sampler.grammars,
        )
        self.finished: list[_Row] = []
        self.scores: list[PromptScores] = [PromptScores() for _ in jobs]
        self.pending = deque(range(len(jobs)))
        self.running: _Running | None = None

    def results(self) -> list[SampleResult]:
        while self.pending or self.running is not None:
            admitted = self._admit()
            if admitted:
                self._join(admitted)
            if self.running is not None:
                self._step()
        out = []
        for j, job in enumerate(self.jobs):
            rows = sorted((r for r in self.finished if r.job == j), key=lambda r: r.sample)
            seqs = [
                SampledSeq(
                    r.tokens, r.logprobs, r.stop_reason or "length", r.topk, r.model_logprobs
                )
                for r in rows
            ]
            hits = (job.num_samples - 1) * len(
                job.prompt
            )  # every sample but one reuses the prefill
            failed = self.processors.errors.get(j)
            error = None if failed is None else InvalidInput("sampling_params", failed)
            out.append(SampleResult(seqs, self.scores[j], hits, error))
        return out

    def _admit(self) -> list[int]:
        """Jobs (in arrival order) that fit beside the running rows; at least one if none run."""
        rows = 0 if self.running is None else len(self.running.rows)
        length = 0 if self.running is None else self.running.mask_R_L.shape[1]
        admitted: list[int] = []
        longest_prompt = 0
        while self.pending:
            job = self.jobs[self.pending[0]]
            n, p = job.num_samples, len(job.prompt)
            need_rows = rows + n
            held = need_rows * (max(length, p) + 1)
            prefill = (len(admitted) + 1) * max(longest_prompt, p)
            fits = need_rows <= self.s.max_rows and max(held, prefill) <= self.s.max_tokens
            if not fits and (admitted or self.running is not None):
                break
            admitted.append(self.pending.popleft())
            rows, length, longest_prompt = need_rows, max(length, p), max(longest_prompt, p)
        return admitted

    def _join(self, admitted: list[int]) -> None:
        """Prefill the admitted jobs, draw each sample's first token, and merge the rows that go
        on into the running batch (kept sorted by adapter: each adapter's rows contiguous)."""
        admitted = sorted(admitted, key=lambda j: self.adapters[j] or "")
        cache = DynamicCache()
        jobs = [self.jobs[j] for j in admitted]
        logits_J_V, scores, mask_J_L = self.s._prefill(
            jobs, [self.adapters[j] for j in admitted], cache
        )
        for j, sc in zip(admitted, scores, strict=True):
            self.scores[j] = sc
        index = [k for k, job in enumerate(jobs) for _ in range(job.num_samples)]
        rows = [
            _Row(
                job=j,
                sample=i,
                topk=[] if self.jobs[j].topk_logprobs else None,
                model_logprobs=[] if self.jobs[j].controls.logprobs_of == "both" else None,
            )
            for j in admitted
            for i in range(self.jobs[j].num_samples)
        ]
        index_t = torch.tensor(index, device=self.s.device)
        tokens = self._advance(rows, logits_J_V[index_t])
        keep = [pos for pos, r in enumerate(rows) if r.stop_reason is None]
        if not keep:
            return
        keep_t = index_t[torch.tensor(keep, device=self.s.device)]
        cache.batch_select_indices(keep_t)
        mask = mask_J_L[keep_t]
        new = _Running(
            [rows[p] for p in keep], cache, mask, mask.sum(-1) - 1, [tokens[p] for p in keep]
        )
        self.running = new if self.running is None else self._merge(self.running, new)

    def _merge(self, old: _Running, new: _Running) -> _Running:
        length = max(old.mask_R_L.shape[1], new.mask_R_L.shape[1])
        rows = old.rows + new.rows
        order = sorted(range(len(rows)), key=lambda i: self.adapters[rows[i].job] or "")
        order_t = torch.tensor(order, device=self.s.device)
        for lo, ln in zip(_layers(old.cache), _layers(new.cache), strict=True):
            keys = [_left_pad(t, length) for t in (lo.keys, ln.keys) if t is not None]
            values = [_left_pad(t, length) for t in (lo.values, ln.values) if t is not None]
            lo.keys, lo.values = torch.cat(keys)[order_t], torch.cat(values)[order_t]
        mask = torch.cat([_left_pad(old.mask_R_L, length), _left_pad(new.mask_R_L, length)])
        positions = torch.cat([old.positions_R, new.positions_R])
        feed = old.feed + new.feed
        return _Running(
            [rows[i] for i in order],
            old.cache,
            mask[order_t],
            positions[order_t],
            [feed[i] for i in order],
        )

    def _advance(self, rows: list[_Row], logits_R_V: torch.Tensor) -> list[int]:
        """Draw the next token of each row and append it; marks rows that stop."""
        tokens, logps, tops, model_logps = self.s._draw(logits_R_V, rows, self)
        complete = self.processors.advance(rows, tokens)
        for pos, row in enumerate(rows):
            if row.topk is not None:
                row.topk.append(tops[pos])
            if row.model_logprobs is not None and model_logps is not None:
                row.model_logprobs.append(model_logps[pos])
            self._append(row, tokens[pos], logps[pos], complete[pos])
            if row.stop_reason is None and row.job in self.processors.errors:
                row.stop_reason = "stop"  # its request failed: the rows go, the error stays
            if row.stop_reason is not None:
                self.finished.append(row)
        self.processors.release(rows)
        if self.on_tokens is not None:
            self.on_tokens(
                [
                    SampledToken(
                        r.job,
                        r.sample,
                        len(r.tokens) - 1,
                        r.tokens[-1],
                        r.logprobs[-1],
                        None if r.topk is None else r.topk[-1],
                    )
                    for r in rows
                ]
            )
        return tokens

    def _step(self) -> None:
        """Feed every running row its last token, draw the next, and drop rows that stopped."""
        run = self.running
        assert run is not None  # noqa: S101 — an invariant of this code, not a check of input
        mask = torch.cat([run.mask_R_L, run.mask_R_L.new_ones(len(run.rows), 1)], dim=1)
        positions = run.positions_R + 1
        plan = RowPlan.of([self.adapters[r.job] for r in run.rows], self.s.device)
        with self.s.router.rows(plan):
            out = self.s.model(
                input_ids=torch.tensor(run.feed, device=self.s.device).unsqueeze(1),
                attention_mask=mask,
                position_ids=positions.unsqueeze(1),
                cache=run.cache,
                use_cache=True,
            )
        tokens = self._advance(run.rows, out.logits[:, -1].float())
        keep = [pos for pos, r in enumerate(run.rows) if r.stop_reason is None]
        if not keep:
            self.running = None
            return
        if len(keep) < len(run.rows):
            keep_t = torch.tensor(keep, device=self.s.device)
            run.cache.batch_select_indices(keep_t)
            mask, positions = mask[keep_t], positions[keep_t]
        # Columns that are padding in every remaining row are dropped (positions are explicit).
        lead = int((mask.cumsum(-1) == 0).sum(-1).min())
        if lead:
            mask = mask[:, lead:]
            for layer in _layers(run.cache):
                if layer.keys is not None and layer.values is not None:
                    layer.keys = layer.keys[..., lead:, :]
                    layer.values = layer.values[..., lead:, :]
        self.running = _Running(
            [run.rows[p] for p in keep], run.cache, mask, positions, [tokens[p] for p in keep]
        )

    def _append(self, row: _Row, token: int, logprob: float, complete: bool = False) -> None:
        """``complete``: the row's grammar allows nothing more."""
        job = self.jobs[row.job]
        row.tokens.append(int(token))
        row.logprobs.append(float(logprob))
        stops = self.s.default_stop if job.stop_tokens is None else job.stop_tokens
        if (
            token in stops
            or complete
            or (job.stop_strings and self._hit_stop_string(row.tokens, job.stop_strings))
        ):
            row.stop_reason = "stop"
        elif len(row.tokens) >= self.limits[row.job]:
            row.stop_reason = "length"

    def _hit_stop_string(self, tokens: list[int], stops: list[str]) -> bool:
        # The newest token can complete a stop string that started several tokens back.
        window = max(len(s) for s in stops) + 8
        text = self.s.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(s in text for s in stops)


def _layers(cache: DynamicCache) -> list[DynamicLayer]:
    """The cache's layers; rows are merged and trimmed by hand, which only full-attention
    layers allow (a sliding window or linear attention keeps no per-position history)."""
    layers = []
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(f"continuous batching needs full-attention caches: {layer}")
        layers.append(layer)
    return layers


def _left_pad(t: torch.Tensor, length: int) -> torch.Tensor:
    """Zeros before dim -2 (KV: [rows, heads, L, dim]) or dim -1 (mask: [rows, L])."""
    if t.dim() == 2:
        return torch.nn.functional.pad(t, (length - t.shape[-1], 0))
    return torch.nn.functional.pad(t, (0, 0, length - t.shape[-2], 0))
