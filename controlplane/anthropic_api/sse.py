"""Streaming messages as Anthropic's named server-sent events, in its order: ``message_start``
(with ``input_tokens``), ``content_block_start``, ``ping``, ``content_block_delta`` text deltas
as the tokens are drawn, ``content_block_stop``, ``message_delta`` (``stop_reason``,
``stop_sequence``, ``output_tokens``), ``message_stop``. A keep-alive is a ``ping``; a failure
once the stream has begun is a last ``error`` event in Anthropic's error shape."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from controlplane.completions import live
from controlplane.edge.anthropic_errors import anthropic_error_of

from .responses import head, stop_reason, usage

PING = {"type": "ping"}


def event(data: dict) -> bytes:
    """One event, named by its ``type``."""
    body = json.dumps(data, separators=(",", ":"))
    return f"event: {data['type']}\ndata: {body}\n\n".encode()


def event_stream(events: Iterable[dict]) -> Iterator[bytes]:
    for data in events:
        yield event(data)


def message_events(
    events: Iterable[live.Event], *, model: str, input_tokens: int
) -> Iterator[dict]:
    """The events of one message (one choice) from the stream's ``events``."""
    choice = None
    for e in events:
        if isinstance(e, live.Started):
            yield {
                "type": "message_start",
                "message": {
                    **head(e.id, model),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": input_tokens,
                        "output_tokens": 0,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "service_tier": "standard",
                    },
                },
            }
            yield {"type": "content_block_start", "index": 0, "content_block": _block()}
            yield PING
        elif e is None:
            yield PING
        elif isinstance(e, live.Text) and e.text:
            yield {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": e.text},
            }
        elif isinstance(e, live.Finished):
            choice = e.choice
            yield {"type": "content_block_stop", "index": 0}
        elif isinstance(e, live.Ended) and choice is not None:
            used = usage(e.done)
            yield {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(choice), "stop_sequence": choice.stop},
                "usage": {
                    "input_tokens": used["input_tokens"],
                    "output_tokens": used["output_tokens"],
                },
            }
            yield {"type": "message_stop"}
        elif isinstance(e, live.Failed):
            yield anthropic_error_of(e.error)[1]
            return


def _block() -> dict:
    return {"type": "text", "text": ""}
