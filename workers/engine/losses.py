"""Per-token losses of the wire protocol, summed over tokens and datums with no normalisation.

Every function takes the current policy logprobs ``p_B_T`` of the target tokens (with grad) and
the packed inputs (zero past each row's end), and returns the per-token loss ``loss_B_T``; rows
are datums. Normalisation is the client's job: it scales weights or advantages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from loopwright.types import UNSUPPORTED_LOSSES

from . import stable_reinforce
from .errors import InvalidInput

Tensor = torch.Tensor
LossFn = Callable[[Tensor, Mapping[str, Tensor], Mapping[str, float]], Tensor]
MetricsFn = Callable[[Tensor, Mapping[str, Tensor], Mapping[str, float]], dict[str, Tensor]]
DatumCheck = Callable[[Mapping[str, np.ndarray], str], None]
ConfigCheck = Callable[[Mapping[str, float]], None]


@dataclass(frozen=True)
class LossSpec:
    """A loss: which ``loss_fn_inputs`` it needs and accepts, its (numeric) config keys with
    their defaults, optional checks of its merged config and of each datum's inputs, and
    optional per-token metrics (``name:sum`` keys, summed over real tokens by the pass)."""

    fn: LossFn
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    config: Mapping[str, float] = field(default_factory=dict)
    required_config: tuple[str, ...] = ()
    check_datum: DatumCheck | None = None
    check_config: ConfigCheck | None = None
    metrics: MetricsFn | None = None

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


def gspo(p: Tensor, inputs: Mapping[str, Tensor], cfg: Mapping[str, float]) -> Tensor:
    """GSPO-token: ``-min(s_t·A, clip(s_t, lo, hi)·A)`` where every token's ``s_t`` has the value
    of its sequence's ratio ``s = exp(mean over marked tokens of (p - q))`` (no gradient through
    the mean) and the gradient of its own ``p``: ``s_t = sg(s)·exp(p - sg(p))``."""
    marked_B_T = (inputs["sequence_ratio_mask"] != 0).to(p.dtype)
    log_ratio_B = ((p.detach() - inputs["logprobs"]) * marked_B_T).sum(-1) / marked_B_T.sum(-1)
    ratio_B_T = torch.exp(log_ratio_B.unsqueeze(-1) + p - p.detach())
    adv = inputs["advantages"]
    clipped = torch.clamp(ratio_B_T, cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    return -torch.minimum(ratio_B_T * adv, clipped * adv)


def _marks_a_token(inputs: Mapping[str, np.ndarray], where: str) -> None:
    if not np.any(inputs["sequence_ratio_mask"] != 0):
        raise InvalidInput(
            f"{where}.loss_fn_inputs.sequence_ratio_mask",
            "marks no token: the sequence ratio is the mean over at least one marked token",
        )


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
    # Tinker does not publish GSPO's default clip range, so it is asked for, not guessed.
    "gspo": LossSpec(
        gspo,
        required=(*_RL_INPUTS, "sequence_ratio_mask"),
        required_config=("clip_low_threshold", "clip_high_threshold"),
        check_datum=_marks_a_token,
    ),
    "stable_reinforce": LossSpec(
        stable_reinforce.loss,
        required=stable_reinforce.INPUTS,
        config=stable_reinforce.CONFIG,
        check_datum=stable_reinforce.check_datum,
        check_config=stable_reinforce.check_config,
        metrics=stable_reinforce.metrics,
    ),
}


def resolve_loss(
    name: str, config: Mapping[str, float | str] | None
) -> tuple[LossSpec, dict[str, float]]:
    """Look up a loss and merge its config: every key a loss takes is a finite number (a string
    value, possible since tinker's loss_fn_config_v2, is refused naming the key). Unknown or
    unsupported names and unknown keys are an InvalidInput."""
    spec = LOSSES.get(name)
    if spec is None:
        if name in UNSUPPORTED_LOSSES:
            raise InvalidInput("loss_fn", UNSUPPORTED_LOSSES[name])
        raise InvalidInput("loss_fn", f"unknown loss {name!r}; expected one of {sorted(LOSSES)}")
    merged = dict(spec.config)
    allowed = set(spec.config) | set(spec.required_config)
    for key, value in (config or {}).items():
        if key not in allowed:
            raise InvalidInput(
                f"loss_fn_config.{key}",
                f"not a parameter of {name}; accepted: {sorted(allowed) or 'none'}",
            )
        merged[key] = _number(key, value)
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
    if spec.check_config is not None:
        spec.check_config(merged)
    return spec, merged


def _number(key: str, value: object) -> float:
    if isinstance(value, str):
        raise InvalidInput(f"loss_fn_config.{key}", f"must be a number, not the text {value!r}")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidInput(f"loss_fn_config.{key}", "must be a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidInput(f"loss_fn_config.{key}", "must be finite")
    return number
