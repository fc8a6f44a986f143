"""DPO and KTO as custom losses for ``forward_backward_custom``.

Each loss receives the batch and the policy's per-token logprobs (one torch tensor per datum)
and returns ``(loss, metrics)``; the reference model's sequence logprobs are computed beforehand
(with a sampler's ``compute_logprobs``) and passed in. torch is imported when a loss runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loopwright.types import Datum

__all__ = ["dpo_loss", "kto_loss", "masked_sum", "sequence_logprob"]


def sequence_logprob(logprobs: Sequence[float | None], weights: Sequence[float]) -> float:
    """Sum of the trained tokens' logprobs; ``logprobs`` and ``weights`` are aligned per target."""
    if len(logprobs) != len(weights):
        raise ValueError(f"{len(logprobs)} logprobs for {len(weights)} weights")
    return float(sum((lp or 0.0) * w for lp, w in zip(logprobs, weights, strict=True) if w))


def masked_sum(datum: Datum, logprobs: Any) -> Any:
    """A datum's sequence logprob (torch): per-token logprobs times its weights, summed."""
    weights = datum.loss_fn_inputs["weights"].to_torch().to(logprobs.dtype)
    return (logprobs * weights).sum()


def dpo_loss(reference: Sequence[float], beta: float) -> Any:
    """DPO on a batch laid out [chosen_0, rejected_0, chosen_1, rejected_1, ...].

    ``reference[i]`` is datum i's sequence logprob under the reference model.
    """

    def loss_fn(data: list[Datum], logprobs_list: list[Any]) -> tuple[Any, dict[str, float]]:
        import torch
        import torch.nn.functional as F

        if len(data) % 2 or len(reference) != len(data):
            raise ValueError("DPO needs (chosen, rejected) pairs and a reference per datum")
        policy = torch.stack([masked_sum(d, lp) for d, lp in zip(data, logprobs_list, strict=True)])
        rewards = policy - torch.tensor(list(reference), dtype=policy.dtype)
        chosen, rejected = rewards[0::2], rewards[1::2]
        margin = beta * (chosen - rejected)
        loss = -F.logsigmoid(margin).mean()
        metrics = {
            "dpo/loss": float(loss.detach()),
            "dpo/accuracy": float((margin > 0).float().mean()),
            "dpo/margin": float(margin.detach().mean()),
            "dpo/chosen_reward": float(beta * chosen.detach().mean()),
            "dpo/rejected_reward": float(beta * rejected.detach().mean()),
        }
        return loss, metrics

    return loss_fn


def kto_loss(
    reference: Sequence[float],
    labels: Sequence[bool],
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> Any:
    """KTO on unpaired examples labelled desirable (True) or undesirable (False).

    The reference point z0 is the batch's mean policy/reference log-ratio, clamped at 0 and not
    differentiated (an estimate of KL(policy || reference) from the batch itself).
    """

    def loss_fn(data: list[Datum], logprobs_list: list[Any]) -> tuple[Any, dict[str, float]]:
        import torch

        if not (len(reference) == len(labels) == len(data)):
            raise ValueError("KTO needs a reference logprob and a label per datum")
        policy = torch.stack([masked_sum(d, lp) for d, lp in zip(data, logprobs_list, strict=True)])
        ratio = policy - torch.tensor(list(reference), dtype=policy.dtype)
        z0 = ratio.detach().mean().clamp(min=0)
        good = torch.tensor(list(labels), dtype=torch.bool)
        value = torch.where(
            good,
            desirable_weight * (1 - torch.sigmoid(beta * (ratio - z0))),
            undesirable_weight * (1 - torch.sigmoid(beta * (z0 - ratio))),
        )
        loss = value.mean()
        metrics = {"kto/loss": float(loss.detach()), "kto/kl": float(z0)}
        if good.any():
            metrics["kto/reward_desirable"] = float(beta * ratio.detach()[good].mean())
        if (~good).any():
            metrics["kto/reward_undesirable"] = float(beta * ratio.detach()[~good].mean())
        return loss, metrics

    return loss_fn
