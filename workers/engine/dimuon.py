"""Dimuon (version 1): orthogonalised Nesterov momentum on each LoRA matrix, with the step length
that tinker defines for its learning rate. State is the momentum, keyed by parameter name.

One step, for every LoRA matrix ``W`` (m × n) with a gradient ``G``, after the global gradient
norm is clipped to ``grad_clip_norm`` (when > 0, exactly as AdamW's):

    M ← β₁·M + (1 − β₁)·G                  momentum (``AdamState.exp_avg``), from 0
    U = (1 − β₁)·G + β₁·M                  Nesterov, as torch.optim.Muon's ``grad.lerp(buf, β₁)``
    O = NS₅(U)                             Muon's quintic Newton–Schulz iteration
    D = O · √rank / ‖O‖_F                  a direction of Frobenius norm √rank (0 when O is 0)
    W ← W − learning_rate · D

``NS₅`` is torch.optim.Muon's (Keller Jordan's): ``X = U/max(‖U‖_F, 1e-7)`` (transposed first
when m > n), then five times ``A = X·Xᵀ; X ← a·X + (b·A + c·A²)·X`` with (a, b, c) =
(3.4445, −4.7750, 2.0315), in float32 (torch runs it in bfloat16). ``rank`` is the adapter's
LoRA rank; tinker: the learning rate is "applied to a direction with Frobenius norm sqrt(rank),
with rank correction applied uniformly to all LoRA matrices". No weight decay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .errors import InvalidInput
from .optim import AdamState, clip_coefficient, step_metrics

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim._muon.DEFAULT_A, _B, _C
NS_STEPS = 5
NS_EPS = 1e-7


@dataclass(frozen=True)
class DimuonHyper:
    learning_rate: float
    grad_clip_norm: float = 0.0
    beta1: float = 0.9

    def validate(self) -> None:
        limits = {
            "learning_rate": (self.learning_rate >= 0, "≥ 0"),
            "grad_clip_norm": (True, "a number"),
            "beta1": (0 <= self.beta1 < 1, "in [0, 1)"),
        }
        for name, (ok, limit) in limits.items():
            value = getattr(self, name)
            if not math.isfinite(value) or not ok:
                raise InvalidInput(f"optimizer_params.{name}", f"{value} is not {limit}")


def orthogonalised(u: torch.Tensor) -> torch.Tensor:
    """``NS₅(u)``: Muon's Newton–Schulz approximation of ``U·Vᵀ`` (u = U·S·Vᵀ), in float32."""
    a, b, c = NS_COEFFICIENTS
    x = u.float()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=NS_EPS)
    for _ in range(NS_STEPS):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


@torch.no_grad()
def dimuon_step(
    params: Mapping[str, torch.nn.Parameter], state: AdamState, hp: DimuonHyper, rank: int
) -> dict[str, float]:
    """One Dimuon update over every parameter that has a gradient; grads are cleared after."""
    hp.validate()
    grad_norm, clip_coef = clip_coefficient(params, hp.grad_clip_norm)
    state.step += 1
    length = math.sqrt(rank)
    for name, p in params.items():
        grad = p.grad
        if grad is None:
            continue
        if p.ndim != 2:
            raise InvalidInput("optimizer_params", f"{name} is not a matrix; Dimuon needs one")
        if clip_coef != 1.0:
            grad = grad * clip_coef
        m = state.exp_avg.get(name)
        if m is None:
            m = state.exp_avg[name] = torch.zeros_like(p)
        m.lerp_(grad, 1 - hp.beta1)
        direction = orthogonalised(grad.lerp(m, hp.beta1))
        norm = direction.norm()
        if norm > 0:
            p.add_(direction * (length / norm), alpha=-hp.learning_rate)
        p.grad = None
    return step_metrics(grad_norm, clip_coef, hp.learning_rate, state.step)
