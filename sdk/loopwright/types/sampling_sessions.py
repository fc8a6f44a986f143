"""Sampling sessions: a sampler bound to a base model or saved weights, reused across samples."""

from __future__ import annotations

from typing import Literal

from ._base import RequestModel, ResponseModel
from .limits import BaseModelName, Counter, Id, TinkerPath
from .queue import QueueStatus

__all__ = [
    "CreateSamplingSessionRequest",
    "CreateSamplingSessionResponse",
    "GetSamplerResponse",
]


class CreateSamplingSessionRequest(RequestModel):
    """Open a sampler within a client session."""

    session_id: Id
    """The client session it belongs to."""

    sampling_session_seq_id: Counter
    """Counter of sampling sessions within the client session: 0 to 2^31 − 1."""

    base_model: BaseModelName | None = None
    """Base model to sample from; inferred from model_path when that is given."""

    model_path: TinkerPath | None = None
    """tinker:// path of sampler weights (or a model package version's ARN); None samples the
    base model."""

    model_id: Id | None = None
    """A live training model whose current adapter to sample (Loopwright extension)."""

    type: Literal["create_sampling_session"] = "create_sampling_session"
    """Request kind tag."""


class CreateSamplingSessionResponse(ResponseModel):
    """The sampler that was opened."""

    type: Literal["create_sampling_session"] = "create_sampling_session"
    """Response kind tag."""

    sampling_session_id: str
    """Id to pass in sample requests."""

    queue: QueueStatus | None = None
    """Where it stands in the placement queue when no worker can take it yet (Loopwright): its
    samples wait until one can; None when it has a worker."""


class GetSamplerResponse(ResponseModel):
    """What a sampler samples from."""

    sampler_id: str
    """The sampling session id."""

    base_model: str
    """The base model name."""

    model_path: str | None = None
    """tinker:// path of the weights, if any."""

    queue: QueueStatus | None = None
    """Where it stands in the placement queue while no worker can take it (Loopwright)."""
