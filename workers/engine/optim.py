"""AdamW with decoupled weight decay and global-norm gradient clipping, state keyed by name.

State is keyed by parameter name (not by tensor identity) so an adapter can be evicted, saved
and reloaded into new tensors and continue bit-exactly. The update follows torch.optim.AdamW.
The same state holds Dimuon's momentum (``exp_avg``, with no ``exp_avg_sq``; ``dimuon``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from loopwright.types import SUPPORTED_OPTIMIZERS, unsupported_optimizer

from .errors import InvalidInput


def optimizer_family(config: Mapping[str, object] | None) -> str:
    """The optimizer a model is created with, from tinker's ``optimizer_config`` (None: AdamW;
    Dimuon is version 1)."""
    kind = "adamw" if config is None else config.get("type", "adamw")
    if kind not in SUPPORTED_OPTIMIZERS:
        raise InvalidInput("optimizer_config.type", unsupported_optimizer(kind))
    if kind == "dimuon" and config is not None and config.get("version", 1) != 1:
        raise InvalidInput("optimizer_config.version", "Dimuon's version is 1")
    return str(kind)


@dataclass(frozen=True)
class AdamHyper:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0

    def validate(self) -> None:
        checks = {
            "learning_rate": self.learning_rate >= 0,
            "beta1": 0 <= self.beta1 < 1,
            "beta2": 0 <= self.beta2 < 1,
            "eps": self.eps >= 0,
            "weight_decay": self.weight_decay >= 0,
            "grad_clip_norm": self.grad_clip_norm >= 0,
        }
        limits = {
            "learning_rate": "≥ 0",
            "beta1": "in [0, 1)",
            "beta2": "in [0, 1)",
            "eps": "≥ 0",
            "weight_decay": "≥ 0",
            "grad_clip_norm": "≥ 0 (0 turns clipping off)",
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if not math.isfinite(value) or not ok:
                raise InvalidInput(f"adam_params.{name}", f"{value} is not {limits[name]}")


@dataclass
class AdamState:
    """Moments per parameter name and the number of steps taken."""

    step: int = 0
    exp_avg: dict[str, torch.Tensor] = field(default_factory=dict)
    exp_avg_sq: dict[str, torch.Tensor] = field(default_factory=dict)

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {f"exp_avg/{k}": v for k, v in self.exp_avg.items()}
        out.update({f"exp_avg_sq/{k}": v for k, v in self.exp_avg_sq.items()})
        return out

    @classmethod
    def from_tensors(cls, step: int, tensors: Mapping[str, torch.Tensor]) -> AdamState:
        state = cls(step=step)
        for key, value in tensors.items():
            kind, _, name = key.partition("/")
            getattr(state, kind)[name] = value
        return state

    def to(self, device: torch.device) -> AdamState:
        return AdamState(
            self.step,
            {k: v.to(device) for k, v in self.exp_avg.items()},
            {k: v.to(device) for k, v in self.exp_avg_sq.items()},
        )


def global_grad_norm(params: Mapping[str, torch.Tensor]) -> float:
    grads = [p.grad for p in params.values() if p.grad is not None]
    if not grads:
        return 0.0
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
    )


def clip_coefficient(params: Mapping[str, torch.Tensor], max_norm: float) -> tuple[float, float]:
    """The global gradient norm and the factor that clips it to ``max_norm`` (> 0; else 1)."""
    grad_norm = global_grad_norm(params)
    if not math.isfinite(grad_norm):
        raise InvalidInput("gradients", f"global gradient norm is {grad_norm}; step not applied")
    clip_coef = 1.0
    if max_norm > 0 and grad_norm > max_norm:
        clip_coef = max_norm / (grad_norm + 1e-6)
    return grad_norm, clip_coef


@torch.no_grad()
def adamw_step(
    params: Mapping[str, torch.nn.Parameter], state: AdamState, hp: AdamHyper
) -> dict[str, float]:
    """One AdamW update over every parameter that has a gradient; grads are cleared after.

    The float32 parameters (a LoRA adapter's, usually all of them) are updated by one
    multi-tensor (``torch._foreach_*``) call per step of the update: the same element-wise
    operations in the same order as one parameter at a time, so the same bits, in a dozen
    dispatches instead of a dozen per parameter. Others (bf16, say, whose multi-tensor
    ``addcmul`` rounds once where the single-tensor one rounds twice) go one at a time."""
    hp.validate()
    grad_norm, clip_coef = clip_coefficient(params, hp.grad_clip_norm)
    state.step += 1
    step = _AdamStep(hp, state.step, clip_coef)
    batched: list[str] = []
    for name, p in params.items():
        if p.grad is None:
            continue
        if name not in state.exp_avg:
            state.exp_avg[name] = torch.zeros_like(p)
            state.exp_avg_sq[name] = torch.zeros_like(p)
        if p.dtype == torch.float32 and p.grad.dtype == torch.float32:
            batched.append(name)
        else:
            step.one(p, state.exp_avg[name], state.exp_avg_sq[name])
    if batched:
        step.many(
            [params[name] for name in batched],
            [state.exp_avg[name] for name in batched],
            [state.exp_avg_sq[name] for name in batched],
        )
    return step_metrics(grad_norm, clip_coef, hp.learning_rate, state.step)


class _AdamStep:
    """One AdamW step's constants, applied to one parameter or to many at once (grads are
    taken from the parameters and cleared)."""

    def __init__(self, hp: AdamHyper, step: int, clip_coef: float) -> None:
        self.hp = hp
        self.clip_coef = clip_coef
        self.bias2_sqrt = math.sqrt(1 - hp.beta2**step)
        self.step_size = hp.learning_rate / (1 - hp.beta1**step)

    def one(self, p: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> None:
        hp, grad = self.hp, p.grad
        if self.clip_coef != 1.0:
            grad = grad * self.clip_coef
        p.mul_(1 - hp.learning_rate * hp.weight_decay)
        m.lerp_(grad, 1 - hp.beta1)
        v.mul_(hp.beta2).addcmul_(grad, grad, value=1 - hp.beta2)
        denom = (v.sqrt() / self.bias2_sqrt).add_(hp.eps)
        p.addcdiv_(m, denom, value=-self.step_size)
        p.grad = None

    def many(self, ps: list[torch.Tensor], ms: list[torch.Tensor], vs: list[torch.Tensor]) -> None:
        hp = self.hp
        grads = [p.grad for p in ps]
        if self.clip_coef != 1.0:
            grads = list(torch._foreach_mul(grads, self.clip_coef))
        torch._foreach_mul_(ps, 1 - hp.learning_rate * hp.weight_decay)
        torch._foreach_lerp_(ms, grads, 1 - hp.beta1)
        torch._foreach_mul_(vs, hp.beta2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - hp.beta2)
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, self.bias2_sqrt)
        torch._foreach_add_(denom, hp.eps)
        torch._foreach_addcdiv_(ps, ms, denom, value=-self.step_size)
        for p in ps:
            p.grad = None


def step_metrics(
    grad_norm: float, clip_coef: float, learning_rate: float, step: int
) -> dict[str, float]:
    """What an optimizer step reports, whatever its family."""
    return {
        "grad_norm:mean": grad_norm,
        "grad_clip_coef:mean": clip_coef,
        "learning_rate:mean": learning_rate,
        "step:max": float(step),
    }
