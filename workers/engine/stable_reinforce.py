"""stable_reinforce: REINFORCE on the recorded sampler's tokens with masked importance weights and
an optional KL-to-sampler penalty, per token, summed over tokens and datums (no normalisation).

Engine contract. ``loss_fn_inputs`` of every datum, each of the input's length N:
``target_tokens`` int64; ``advantages`` float32, 0 wherever ``sampled_mask`` is 0;
``logprobs`` float32, the sampler's logprob of ``target_tokens[i]`` as recorded when it was
sampled (read only where ``sampled_mask`` is 1); ``sampled_mask`` float32, 1.0 where
``target_tokens[i]`` is a sampled token and 0.0 where it is a prompt token. The service fills
``logprobs`` and ``sampled_mask`` from its store of recorded sequences, never from what a client
sent; the engine trusts them.
``loss_fn_config`` (numbers): ``mask_low`` (0.5) and ``mask_high`` (5.0), the band of the
ratio ``r = exp(p − q)`` inside which a sampled token is trained on, with
``0 < mask_low ≤ 1 ≤ mask_high``; ``kl_coeff`` (0.0, ≥ 0), the weight of the penalty.

Per token, with ``p`` the current logprob (with gradient), ``q`` the recorded one, ``A`` the
advantage and ``m`` the mask: ``keep = m·[mask_low ≤ sg(r) ≤ mask_high]`` and
``loss = −keep·r·A + kl_coeff·m·½(p − q)²``, so the gradient is ``−keep·r·A·∇p`` (token-level
masked importance sampling, IcePop) plus ``kl_coeff·m·(p − q)·∇p`` (Schulman's k2 estimator of
the KL to the sampler). Besides ``loss:sum`` it reports ``sampled_tokens:sum``,
``masked_tokens:sum`` (sampled tokens whose ratio left the band) and ``kl_sampler:sum``
(``Σ m·½(p − q)²``). Sources and reasons: docs/tinker-protocol.md, section "stable_reinforce".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from loopwright.types import STABLE_REINFORCE_CONFIG, stable_reinforce_config_problem

from .errors import InvalidInput

Tensor = torch.Tensor

INPUTS = ("logprobs", "advantages", "sampled_mask")
CONFIG = STABLE_REINFORCE_CONFIG  # the wire types refuse a bad config on arrival too


def _log_ratio(p: Tensor, inputs: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
    """``(p − q)`` on sampled tokens and 0 elsewhere (q is not read there), and the mask."""
    sampled = inputs["sampled_mask"] != 0
    return torch.where(sampled, p - inputs["logprobs"], torch.zeros_like(p)), sampled


def _kept(log_ratio: Tensor, sampled: Tensor, cfg: Mapping[str, float]) -> Tensor:
    ratio = torch.exp(log_ratio.detach())
    return sampled & (ratio >= cfg["mask_low"]) & (ratio <= cfg["mask_high"])


def loss(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> Tensor:
    """Per-token ``−keep·r·A + kl_coeff·m·½(p − q)²``."""
    log_ratio, sampled = _log_ratio(p, inputs)
    kept = _kept(log_ratio, sampled, cfg)
    # exp only of kept log-ratios: an outlying one (even one whose exp overflows) gives neither
    # a value nor a gradient, never 0·inf
    ratio = torch.exp(torch.where(kept, log_ratio, torch.zeros_like(log_ratio)))
    policy = -kept.to(p.dtype) * ratio * inputs["advantages"]
    if cfg["kl_coeff"] == 0:
        return policy
    return policy + cfg["kl_coeff"] * 0.5 * log_ratio**2


def metrics(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> dict[str, Tensor]:
    """Per-token counts and penalty, summed by the pass into ``name:sum`` metrics."""
    log_ratio, sampled = _log_ratio(p.detach(), inputs)
    kept = _kept(log_ratio, sampled, cfg)
    return {
        "sampled_tokens:sum": sampled.to(p.dtype),
        "masked_tokens:sum": (sampled & ~kept).to(p.dtype),
        "kl_sampler:sum": 0.5 * log_ratio**2,
    }


def check_config(cfg: Mapping[str, float]) -> None:
    problem = stable_reinforce_config_problem(cfg)
    if problem is not None:
        raise InvalidInput(f"loss_fn_config.{problem[0]}", problem[1])


def check_datum(inputs: Mapping[str, np.ndarray], where: str) -> None:
    """``sampled_mask`` holds only 0 and 1; advantages are 0 on prompt tokens."""
    mask = inputs["sampled_mask"]
    bad = np.flatnonzero((mask != 0) & (mask != 1))
    if bad.size:
        i = int(bad[0])
        raise InvalidInput(
            f"{where}.loss_fn_inputs.sampled_mask",
            f"holds {mask[i]} at position {i}; each entry is 1.0 (sampled) or 0.0 (prompt)",
        )
    stray = np.flatnonzero((mask == 0) & (inputs["advantages"] != 0))
    if stray.size:
        i = int(stray[0])
        raise InvalidInput(
            f"{where}.loss_fn_inputs.advantages",
            f"is {inputs['advantages'][i]} at position {i}, a prompt token: stable_reinforce "
            "takes advantages only on sampled tokens",
        )
