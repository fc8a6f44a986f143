"""An independent reference for the sampling controls: one row, one token at a time, in numpy.

It follows docs/sampling.md word for word and shares no code with the engine: float32 scalar
arithmetic in the documented order for the logits processors, float64 for the probabilities
that min-p, top-k and top-p compare.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

F = np.float32


@dataclass
class Asked:
    """What one request asks for, as plain values."""

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)


def processed(
    logits: np.ndarray, prompt: Sequence[int], completion: Sequence[int], a: Asked
) -> np.ndarray:
    """Steps 1–3 (penalties, then bias) on one row of float32 logits."""
    out = np.array(logits, dtype=F)
    seen = set(prompt) | set(completion)
    counts = Counter(completion)
    r = F(a.repetition_penalty)
    for token in range(out.shape[0]):
        value = out[token]
        if a.repetition_penalty != 1.0 and token in seen:
            value = value / r if value > 0 else value * r
        c = counts.get(token, 0)
        if a.frequency_penalty or a.presence_penalty:
            value = value - F(c) * F(a.frequency_penalty)
            value = value - (F(a.presence_penalty) if c > 0 else F(0.0))
        out[token] = value
    forced = {t for t, b in a.logit_bias.items() if b >= 100}
    for token in range(out.shape[0]):
        b = a.logit_bias.get(token)
        if (forced and token not in forced) or (b is not None and b <= -100):
            out[token] = -np.inf
        elif b is not None and b < 100:
            out[token] = out[token] + F(b)
    return out


def drawable_logprobs(pre: np.ndarray, a: Asked) -> np.ndarray:
    """Temperature, min-p, top-k, top-p on the processed logits: the law a token is drawn from,
    as float64 logprobs (``-inf`` for tokens that cannot be drawn)."""
    scaled = pre.astype(np.float64) / (a.temperature or 1.0)
    keep = np.isfinite(scaled)
    if a.min_p > 0:
        p = _softmax(scaled)
        keep &= p >= a.min_p * p.max()
    order = sorted(np.flatnonzero(keep), key=lambda t: -scaled[t])
    if a.top_k > 0:
        order = order[: a.top_k]
    p = _softmax(scaled[order])
    allowed, mass = [], 0.0
    for rank, token in enumerate(order):
        if rank > 0 and mass >= a.top_p:
            break
        allowed.append(token)
        mass += p[rank]
    kept = scaled[allowed]
    final = np.full_like(scaled, -np.inf)
    final[allowed] = kept - (kept.max() + np.log(np.exp(kept - kept.max()).sum()))
    return final


def _softmax(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    e = np.zeros_like(x)
    e[finite] = np.exp(x[finite] - x[finite].max())
    return e / e.sum()
