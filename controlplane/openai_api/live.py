"""``stream: true`` answered as the worker draws the tokens: the events of
``controlplane.completions.live`` written as OpenAI's chunks (``sse.chunks_of``)."""

from __future__ import annotations

from collections.abc import Iterator

from controlplane.completions import live
from controlplane.completions.services import Prepared
from controlplane.tenants.models import Tenant

from .sse import chunks_of


def stream(
    *,
    tenant: Tenant,
    prepared: Prepared,
    idempotency_key: str | None,
    chat: bool,
    logprobs: bool,
    include_usage: bool,
) -> Iterator[dict | None]:
    """Submit the request and return its chunks (None: a keep-alive) as they come. A refusal
    raises here, before anything is sent; a failure later is the stream's last chunk."""
    events = live.stream(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)
    return chunks_of(
        events,
        chat=chat,
        model=prepared.model,
        tokenizer=prepared.tokenizer,
        logprobs=logprobs,
        include_usage=include_usage,
    )
