"""Futures: the id a mutating call answers with, polling it, and the not-done/failed answers."""

from __future__ import annotations

from typing import Literal

from ._base import RequestModel, ResponseModel
from .limits import Id
from .queue import QueueStatus

__all__ = [
    "FutureRetrieveRequest",
    "QueueState",
    "RequestErrorCategory",
    "RequestFailedResponse",
    "TryAgainResponse",
    "UntypedAPIFuture",
]

QueueState = Literal["active", "paused_capacity", "paused_rate_limit"]

RequestErrorCategory = Literal["user", "server", "unknown"]


class UntypedAPIFuture(ResponseModel):
    """The immediate answer of a mutating call: a handle to poll."""

    request_id: str
    """Id to pass to retrieve_future."""

    model_id: str | None = None
    """The model the request concerns, if any."""

    sample_sequence_ids: list[str] | None = None
    """A sample request's sequence ids, one per sample, in order (``SampledSequence.sequence_id``
    of its result): stable across retries, unique in the account."""

    queue: QueueStatus | None = None
    """A create_model that no worker can take now: its place in the placement queue
    (Loopwright)."""


class FutureRetrieveRequest(RequestModel):
    """Poll a future (the server holds the call up to ~45 s while it is pending)."""

    request_id: Id
    """The future to poll."""

    allow_metadata_only: bool = False
    """Whether the server may answer with only the size of a large result first."""


class TryAgainResponse(ResponseModel):
    """The future is still pending; poll again."""

    type: Literal["try_again"] = "try_again"
    """Response kind tag."""

    request_id: str
    """The pending future."""

    queue_state: QueueState | None = None
    """Why it waits: running normally, or paused for capacity or rate limits."""

    queue_state_reason: str | None = None
    """A human-readable explanation of queue_state."""

    queue: QueueStatus | None = None
    """Where its model or sampler stands in the placement queue while no worker can take it
    (Loopwright); None while it is not queued."""


class RequestFailedResponse(ResponseModel):
    """The future failed."""

    error: str
    """What went wrong."""

    category: RequestErrorCategory
    """Whose fault: the caller's ("user"), the server's ("server"), or "unknown"."""
