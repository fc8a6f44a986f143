"""Datums for the server's losses: cross_entropy (SFT, custom losses) and the RL losses.

Position i of a datum's input predicts ``target_tokens[i]``: inputs are ``tokens[:-1]``, targets
``tokens[1:]``, and every per-token tensor is shifted the same way. Losses are summed over
tokens on the server, so normalisation happens here, in the weights and advantages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from loopwright.types import Datum, LossFnType, ModelInput, TensorData

__all__ = [
    "RL_LOSSES",
    "RLSegment",
    "group_relative_advantages",
    "rl_datum",
    "rl_loss",
    "sampled_segment",
    "sequence_datum",
    "sft_datums",
]


def sequence_datum(tokens: Sequence[int], weights: Sequence[float]) -> Datum:
    """A cross_entropy datum: learn ``tokens[i]`` with ``weights[i]`` (the first is context)."""
    if len(tokens) != len(weights):
        raise ValueError(f"{len(tokens)} tokens but {len(weights)} weights")
    if len(tokens) < 2:
        raise ValueError("a datum needs at least two tokens")
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
            "weights": TensorData.from_numpy(np.asarray(weights[1:], dtype=np.float32)),
        },
    )


def sft_datums(conversations: Sequence[tuple[Sequence[int], Sequence[float]]]) -> list[Datum]:
    """cross_entropy datums whose loss is the mean NLL per trained token of the whole batch."""
    total = sum(float(np.sum(weights[1:])) for _, weights in conversations)
    if total <= 0:
        raise ValueError("the batch has no trained tokens")
    return [
        sequence_datum(tokens, [w / total for w in weights]) for tokens, weights in conversations
    ]


@dataclass
class RLSegment:
    """A run of tokens in an RL datum: context (no logprobs, advantage 0) or sampled."""

    tokens: list[int]
    """The tokens, in order."""

    logprobs: list[float] | None = None
    """The sampler's logprob of each token; None for context (prompt, tool results)."""

    advantage: float | list[float] = 0.0
    """One advantage for every token, or one per token; ignored for context."""

    def __post_init__(self) -> None:
        self.tokens = list(self.tokens)
        if self.logprobs is not None:
            self.logprobs = [float(x) for x in self.logprobs]
            if len(self.logprobs) != len(self.tokens):
                raise ValueError(f"{len(self.tokens)} tokens but {len(self.logprobs)} logprobs")
        if not isinstance(self.advantage, int | float) and len(self.advantage) != len(self.tokens):
            raise ValueError(f"{len(self.tokens)} tokens but {len(self.advantage)} advantages")

    @property
    def sampled(self) -> bool:
        """Whether the policy wrote these tokens (they are trained)."""
        return self.logprobs is not None

    def per_token_advantages(self) -> list[float]:
        if not self.sampled:
            return [0.0] * len(self.tokens)
        if isinstance(self.advantage, int | float):
            return [float(self.advantage)] * len(self.tokens)
        return [float(a) for a in self.advantage]

    def with_advantage(self, advantage: float | list[float]) -> RLSegment:
        """A copy with ``advantage`` if sampled; context is returned as is."""
        return replace(self, advantage=advantage) if self.sampled else self


def sampled_segment(
    tokens: Sequence[int], logprobs: Sequence[float] | None, advantage: float | list[float] = 0.0
) -> RLSegment:
    """A sampled run of tokens (e.g. a SampledSequence's); refuses a sample without logprobs."""
    if logprobs is None:
        raise ValueError("the sample has no logprobs; the RL losses need the sampler's logprobs")
    return RLSegment(list(tokens), list(logprobs), advantage)


def rl_datum(segments: Sequence[RLSegment]) -> Datum:
    """An importance_sampling / ppo datum from context and sampled segments, in order.

    Context tokens (the prompt, tool results) get advantage 0, so they add nothing to the loss.
    """
    tokens = [t for s in segments for t in s.tokens]
    logprobs = [x for s in segments for x in (s.logprobs or [0.0] * len(s.tokens))]
    advantages = [x for s in segments for x in s.per_token_advantages()]
    if len(tokens) < 2:
        raise ValueError("a datum needs at least two tokens")
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
            "logprobs": TensorData.from_numpy(np.asarray(logprobs[1:], dtype=np.float32)),
            "advantages": TensorData.from_numpy(np.asarray(advantages[1:], dtype=np.float32)),
        },
    )


RL_LOSSES: tuple[LossFnType, ...] = ("importance_sampling", "ppo", "cispo")


def rl_loss(name: str) -> LossFnType:
    """A loss name from a config, checked: one of the server's RL losses."""
    for loss in RL_LOSSES:
        if loss == name:
            return loss
    raise ValueError(f"loss_fn must be one of {', '.join(RL_LOSSES)}, got {name!r}")


def group_relative_advantages(rewards: Sequence[float], normalize: bool = True) -> list[float]:
    """GRPO advantages: each reward minus its group's mean, divided by the group's std when
    ``normalize`` (a group whose rewards are all equal gets zeros: it carries no signal)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.size == 0:
        return []
    centred = r - r.mean()
    std = r.std()
    if std < 1e-8:
        return [0.0] * r.size
    return (centred / std if normalize else centred).tolist()
