"""Logits processors of a continuous batch: penalties, logit bias, grammar masks and min-p, each
row by its own job's controls, in one vectorized pass over the rows that ask for them.

Order, on each row's float32 logits ``l`` (docs/sampling.md):
  1. repetition penalty ``r`` on every token of the prompt or the completion so far:
     ``l / r`` where ``l > 0``, else ``l * r``;
  2. frequency and presence penalties on the completion's counts ``c``:
     ``l - c * frequency - (c > 0) * presence``;
  3. logit bias: ``l + b``; ``b = -100`` bans the token (``-inf``), ``b = 100`` forces it (every
     token not forced is banned);
  4. grammar: every token the row's grammar does not allow next is ``-inf``;
  then the sampler divides by the temperature, and
  5. min-p: tokens with probability below ``min_p`` × the likeliest token's are ``-inf``
     (compared as ``l < l_max + log(min_p)``);
  then the sampler applies top-k and top-p.
If steps 3–4 leave no token, the step is taken again without the bias (the grammar wins), and
without the grammar if even that leaves none. Each row depends on its own logits, prompt and
completion only: a request packed with others is processed exactly as alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from loopwright.structured_output import Structure
from loopwright.types import SamplingParams

from .constrained import Grammars
from .errors import InvalidInput

if TYPE_CHECKING:
    from llguidance import LLMatcher

BAN, FORCE = -100.0, 100.0
FLOAT32_MAX = torch.finfo(torch.float32).max
LOGPROBS_OF = ("sampled", "model", "both")


@dataclass(frozen=True)
class Controls:
    """One request's processors (defaults: none) and which law its logprobs report."""

    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    structure: Structure | None = None
    logprobs_of: str = "sampled"

    @classmethod
    def of(cls, params: SamplingParams) -> Controls:
        bias = params.logit_bias or {}
        return cls(
            min_p=params.min_p or 0.0,
            repetition_penalty=params.repetition_penalty or 1.0,
            presence_penalty=params.presence_penalty or 0.0,
            frequency_penalty=params.frequency_penalty or 0.0,
            logit_bias=tuple(sorted((int(k), float(v)) for k, v in bias.items())),
            structure=Structure.of(params),
            logprobs_of=params.logprobs_of or "sampled",
        )

    @property
    def penalized(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )

    def check(self, vocab_size: int, where: str = "") -> None:
        """The bounds the wire type states, again for jobs built in process."""
        name = f"{where}sampling_params"
        bounded = {
            "min_p": (self.min_p, 0.0, 1.0),
            "presence_penalty": (self.presence_penalty, -2.0, 2.0),
            "frequency_penalty": (self.frequency_penalty, -2.0, 2.0),
        }
        for field, (value, low, high) in bounded.items():
            if not (math.isfinite(value) and low <= value <= high):
                raise InvalidInput(f"{name}.{field}", f"{value} is outside [{low:g}, {high:g}]")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise InvalidInput(
                f"{name}.repetition_penalty", f"{self.repetition_penalty} must be finite and > 0"
            )
        for token, value in self.logit_bias:
            if not 0 <= token < vocab_size:
                raise InvalidInput(
                    f"{name}.logit_bias",
                    f"token id {token} is outside the vocabulary [0, {vocab_size})",
                )
            if not (math.isfinite(value) and BAN <= value <= FORCE):
                raise InvalidInput(f"{name}.logit_bias", f"{value} is outside [-100, 100]")
        if self.logprobs_of not in LOGPROBS_OF:
            raise InvalidInput(f"{name}.logprobs_of", f"must be one of {', '.join(LOGPROBS_OF)}")


class Row(Protocol):
    """A decoding row as the processors see it (they read it, never write it)."""

    @property
    def job(self) -> int: ...
    @property
    def sample(self) -> int: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def stop_reason(self) -> str | None: ...


class Processors:
    """The processors of one sampler run: per-row state (completion counts, matchers) kept from
    a row's first draw until it stops."""

    def __init__(
        self,
        jobs_controls: Sequence[Controls],
        prompts: Sequence[Sequence[int]],
        vocab_size: int,
        device: torch.device,
        grammars: Grammars,
    ) -> None:
        self.controls = list(jobs_controls)
        self.prompts = prompts
        self.vocab = vocab_size
        self.device = device
        self.grammars = grammars
        self.active = any(
            c.penalized or c.logit_bias or c.structure or c.min_p > 0 for c in self.controls
        )
        self.errors: dict[int, str] = {}  # job -> why its grammar failed while sampling
        self._slots: dict[tuple[int, int], int] = {}  # penalized row -> its row of the counts
        self._free: list[int] = []
        self._counts_S_V = torch.zeros(0, vocab_size, device=device)  # completion counts
        self._seen_S_V = torch.zeros(0, vocab_size, dtype=torch.bool, device=device)  # prompt
        self._bias: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self._matchers: dict[tuple[int, int], LLMatcher] = {}

    # -- before the temperature --------------------------------------------------------------
    def before_temperature(self, logits_R_V: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
        """Steps 1–4 on the rows that ask for them; the same tensor when none does."""
        if not self.active:
            return logits_R_V
        out = self._penalize(logits_R_V, rows)
        biased = [i for i, r in enumerate(rows) if self.controls[r.job].logit_bias]
        constrained = [i for i, r in enumerate(rows) if self.controls[r.job].structure]
        if not biased and not constrained:
            return out
        masked = out.clone()
        if biased:
            masked[biased] = self._biased(out[biased], [rows[i].job for i in biased])
        allowed = None
        if constrained:
            allowed = self._allowed([rows[i] for i in constrained])
            masked[constrained] = masked[constrained].masked_fill(~allowed, -math.inf)
        dead = torch.isneginf(masked).all(-1)
        if bool(dead.any()):  # bias and grammar left nothing: the grammar wins
            fallback = out.clone()
            if allowed is not None:
                fallback[constrained] = fallback[constrained].masked_fill(~allowed, -math.inf)
            fallback = torch.where(torch.isneginf(fallback).all(-1, keepdim=True), out, fallback)
            masked = torch.where(dead.unsqueeze(-1), fallback, masked)
        return masked

    def _penalize(self, logits_R_V: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
        pos = [i for i, r in enumerate(rows) if self.controls[r.job].penalized]
        if not pos:
            return logits_R_V
        slots = torch.tensor([self._slot(rows[i]) for i in pos], device=self.device)
        controls = [self.controls[rows[i].job] for i in pos]
        l_P_V = logits_R_V[pos]
        counts_P_V = self._counts_S_V[slots]
        if any(c.repetition_penalty != 1.0 for c in controls):
            r_P1 = self._column([c.repetition_penalty for c in controls])
            seen = self._seen_S_V[slots] | (counts_P_V > 0)
            l_P_V = torch.where(seen, torch.where(l_P_V > 0, l_P_V / r_P1, l_P_V * r_P1), l_P_V)
            # an extreme penalty saturates instead of overflowing to ±inf
            l_P_V = l_P_V.clamp(-FLOAT32_MAX, FLOAT32_MAX)
        if any(c.frequency_penalty or c.presence_penalty for c in controls):
            freq_P1 = self._column([c.frequency_penalty for c in controls])
            pres_P1 = self._column([c.presence_penalty for c in controls])
            l_P_V = l_P_V - counts_P_V * freq_P1 - (counts_P_V > 0).float() * pres_P1
        out = logits_R_V.clone()
        out[pos] = l_P_V
        return out

    def _column(self, values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=self.device).unsqueeze(-1)

    def _slot(self, row: Row) -> int:
        """The row's slot in the counts (made at its first draw, from its prompt)."""
        key = (row.job, row.sample)
        slot = self._slots.get(key)
        if slot is not None:
            return slot
        if not self._free:
            old = self._counts_S_V.shape[0]
            grown = max(8, 2 * old)
            self._counts_S_V = _grow(self._counts_S_V, grown)
            self._seen_S_V = _grow(self._seen_S_V, grown)
            self._free = list(range(grown - 1, old - 1, -1))
        slot = self._free.pop()
        self._counts_S_V[slot] = 0
        self._seen_S_V[slot] = False
        if self.controls[row.job].repetition_penalty != 1.0:
            prompt = torch.tensor(self.prompts[row.job], device=self.device)
            self._seen_S_V[slot, prompt] = True
        for token in row.tokens:  # none at a row's first draw
            self._counts_S_V[slot, token] += 1
        self._slots[key] = slot
        return slot

    def _biased(self, l_B_V: torch.Tensor, jobs: list[int]) -> torch.Tensor:
        adds, forced = zip(*(self._bias_of(j) for j in jobs), strict=True)
        out = l_B_V + torch.stack(adds)
        if any(f is not None for f in forced):
            keep = torch.stack(
                [torch.ones_like(adds[0], dtype=torch.bool) if f is None else f for f in forced]
            )
            out = out.masked_fill(~keep, -math.inf)
        return out

    def _bias_of(self, job: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A job's bias as a dense row to add (``-inf`` where banned) and its forced tokens."""
        found = self._bias.get(job)
        if found is None:
            add_V = torch.zeros(self.vocab, device=self.device)
            forced_V = torch.zeros(self.vocab, dtype=torch.bool, device=self.device)
            for token, value in self.controls[job].logit_bias:
                if value <= BAN:
                    add_V[token] = -math.inf
                elif value >= FORCE:
                    forced_V[token] = True
                else:
                    add_V[token] = value
            found = (add_V, forced_V if bool(forced_V.any()) else None)
            self._bias[job] = found
        return found

    def _allowed(self, rows: list[Row]) -> torch.Tensor:
        matchers = []
        for row in rows:
            key = (row.job, row.sample)
            if key not in self._matchers:
                structure = self.controls[row.job].structure
                assert structure is not None  # noqa: S101 — only constrained rows come here
                self._matchers[key] = self.grammars.compiled(structure, "sampling_params")
            matchers.append(self._matchers[key])
        allowed = self.grammars.allowed(matchers, self.device)
        for k, (row, matcher) in enumerate(zip(rows, matchers, strict=True)):
            if matcher.is_error():  # a limit reached: the request fails, this row draws freely
                self.errors.setdefault(row.job, matcher.get_error())
                allowed[k] = True
        return allowed

    # -- after the temperature ---------------------------------------------------------------
    def after_temperature(self, scaled_R_V: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
        """Step 5, min-p, on the rows that ask for it."""
        pos = [i for i, r in enumerate(rows) if self.controls[r.job].min_p > 0]
        if not pos:
            return scaled_R_V
        s_P_V = scaled_R_V[pos]
        # p >= min_p * p_max, compared as logits: s >= s_max + log(min_p) (no exponentials)
        floor = self._column([math.log(self.controls[rows[i].job].min_p) for i in pos])
        keep = s_P_V >= s_P_V.max(dim=-1, keepdim=True).values + floor
        out = scaled_R_V.clone()
        out[pos] = s_P_V.masked_fill(~keep, -math.inf)
        return out

    # -- after the draw ----------------------------------------------------------------------
    def advance(self, rows: Sequence[Row], tokens: Sequence[int]) -> list[bool]:
        """Count each row's new token and feed it to its grammar; per row, whether its grammar
        is now complete (the sequence stops there)."""
        done = [False] * len(rows)
        if not self.active:
            return done
        counted = [
            (self._slots[(r.job, r.sample)], t)
            for r, t in zip(rows, tokens, strict=True)
            if (r.job, r.sample) in self._slots
        ]
        if counted:
            slots, toks = zip(*counted, strict=True)
            index = (
                torch.tensor(slots, device=self.device),
                torch.tensor(toks, device=self.device),
            )
            self._counts_S_V.index_put_(
                index, torch.ones(len(slots), device=self.device), accumulate=True
            )
        for pos, (row, token) in enumerate(zip(rows, tokens, strict=True)):
            matcher = self._matchers.get((row.job, row.sample))
            if matcher is None:
                continue
            if not matcher.consume_token(int(token)) or matcher.is_error():
                self.errors.setdefault(row.job, matcher.get_error() or f"token {token} refused")
            done[pos] = matcher.is_stopped()
        return done

    def release(self, rows: Sequence[Row]) -> None:
        """Forget the state of the rows that stopped."""
        for row in rows:
            if row.stop_reason is None:
                continue
            key = (row.job, row.sample)
            slot = self._slots.pop(key, None)
            if slot is not None:
                self._free.append(slot)
            self._matchers.pop(key, None)


def _grow(t: torch.Tensor, rows: int) -> torch.Tensor:
    out = t.new_zeros(rows, *t.shape[1:])
    out[: t.shape[0]] = t
    return out
