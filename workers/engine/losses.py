"""Per-token losses of the wire protocol, summed over tokens and datums with no normalisation.

Every function takes the current policy logprobs ``p_B_T`` of the target tokens (with grad), the
packed inputs and a validity mask, and returns the per-token loss ``loss_B_T`` (zero where the
mask is off). Normalisation is the client's job: it scales weights or advantages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import InvalidInput

Tensor = torch.Tensor
LossFn = Callable[[Tensor, Mapping[str, Tensor], Mapping[str, float]], Tensor]


@dataclass(frozen=True)
class LossSpec:
    """A loss: which ``loss_fn_inputs`` it needs, which it accepts, and its config defaults."""

    fn: LossFn
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    config: Mapping[str, float] = field(default_factory=dict)
    required_config: tuple[str, ...] = ()

    @property
    def accepted_inputs(self) -> tuple[str, ...]:
        return ("target_tokens", *self.required, *self.optional)


def _ratio(p: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
    return torch.exp(p - inputs["logprobs"])


def _clip_bounds(inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> tuple[Any, Any]:
    # Per-token thresholds sent as loss_fn_inputs win over the scalar config.
    low = inputs.get("clip_low_threshold", cfg["clip_low_threshold"])
    high = inputs.get("clip_high_threshold", cfg["clip_high_threshold"])
    return low, high


def cross_entropy(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> Tensor:
    """``-p·w``; weights may be negative (client-side custom losses rely on it)."""
    return -p * inputs["weights"]


def importance_sampling(
    p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]
) -> Tensor:
    """``-r·A`` with ``r = exp(p - q)``."""
    return -_ratio(p, inputs) * inputs["advantages"]


def ppo(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> Tensor:
    """``-min(r·A, clip(r, lo, hi)·A)``."""
    ratio = _ratio(p, inputs)
    adv = inputs["advantages"]
    low, high = _clip_bounds(inputs, cfg)
    clipped = torch.clamp(ratio, low, high)
    return -torch.minimum(ratio * adv, clipped * adv)


def cispo(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> Tensor:
    """``-sg(clip(r, lo, hi))·p·A``: the clipped ratio only weights the policy gradient."""
    low, high = _clip_bounds(inputs, cfg)
    weight = torch.clamp(_ratio(p, inputs), low, high).detach()
    return -weight * p * inputs["advantages"]


def dro(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> Tensor:
    """``-(p·A - ½·β·(p - q)²)``."""
    beta = cfg["beta"]
    return -(p * inputs["advantages"] - 0.5 * beta * (p - inputs["logprobs"]) ** 2)


_RL_INPUTS = ("logprobs", "advantages")
_CLIP_INPUTS = ("clip_low_threshold", "clip_high_threshold")

LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, required=(), optional=("weights",)),
    "importance_sampling": LossSpec(importance_sampling, required=_RL_INPUTS),
    "ppo": LossSpec(
        ppo,
        required=_RL_INPUTS,
        optional=_CLIP_INPUTS,
        config={"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    ),
    "cispo": LossSpec(
        cispo,
        required=_RL_INPUTS,
        optional=_CLIP_INPUTS,
        config={"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    ),
    "dro": LossSpec(dro, required=_RL_INPUTS, required_config=("beta",)),
}


def resolve_loss(
    name: str, config: Mapping[str, float] | None
) -> tuple[LossSpec, dict[str, float]]:
    """Look up a loss and merge its config; unknown names or keys are an InvalidInput."""
    spec = LOSSES.get(name)
    if spec is None:
        raise InvalidInput("loss_fn", f"unknown loss {name!r}; expected one of {sorted(LOSSES)}")
    merged = dict(spec.config)
    allowed = set(spec.config) | set(spec.required_config)
    for key, value in (config or {}).items():
        if key not in allowed:
            raise InvalidInput(
                f"loss_fn_config.{key}",
                f"not a parameter of {name}; accepted: {sorted(allowed) or 'none'}",
            )
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InvalidInput(f"loss_fn_config.{key}", "must be a number")
        if not torch.isfinite(torch.tensor(float(value))):
            raise InvalidInput(f"loss_fn_config.{key}", "must be finite")
        merged[key] = float(value)
    for key in spec.required_config:
        if key not in merged:
            raise InvalidInput(f"loss_fn_config.{key}", f"required by {name}")
    if (
        "clip_low_threshold" in merged
        and merged["clip_low_threshold"] > merged["clip_high_threshold"]
    ):
        raise InvalidInput(
            "loss_fn_config.clip_low_threshold", "must not exceed clip_high_threshold"
        )
    return spec, merged
