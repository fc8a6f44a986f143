"""Requests that run a forward or forward-backward pass on a training model."""

from __future__ import annotations

from ._base import RequestModel
from .limits import Id, SeqId
from .losses import ForwardBackwardInput

__all__ = ["ForwardBackwardRequest", "ForwardRequest"]


class ForwardRequest(RequestModel):
    """Compute the loss and logprobs of a batch without accumulating gradients."""

    forward_input: ForwardBackwardInput
    """The batch and its loss."""

    model_id: Id
    """The training model to run."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""


class ForwardBackwardRequest(RequestModel):
    """Compute the loss of a batch and accumulate its gradients."""

    forward_backward_input: ForwardBackwardInput
    """The batch and its loss."""

    model_id: Id
    """The training model to run."""

    seq_id: SeqId | None = None
    """Per-model request counter; requests run in seq_id order."""
