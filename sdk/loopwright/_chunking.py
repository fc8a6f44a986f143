"""Splitting a batch into request-sized chunks, and merging the chunks' results back into one.

Metrics merge by the ``:reduction`` suffix of their key: sum, mean (weighted by datums), min, max.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import Datum, ForwardBackwardOutput

__all__ = ["MAX_CHUNK_BYTES", "MAX_CHUNK_DATUMS", "merge_metrics", "merge_outputs", "split_chunks"]

MAX_CHUNK_DATUMS = 1024
"""Most datums in one forward or forward_backward request."""

MAX_CHUNK_BYTES = 5_000_000
"""Rough cap on one request's body; a chunk is closed early when the next datum would pass it."""


def _estimated_bytes(datum: Datum) -> int:
    tokens = datum.model_input.length if _all_token_chunks(datum) else 0
    return 10 * (tokens + sum(len(t.data) for t in datum.loss_fn_inputs.values()))


def _all_token_chunks(datum: Datum) -> bool:
    return all(chunk.type == "encoded_text" for chunk in datum.model_input.chunks)


def split_chunks(
    data: Sequence[Datum], max_datums: int = MAX_CHUNK_DATUMS, max_bytes: int = MAX_CHUNK_BYTES
) -> list[list[Datum]]:
    """Consecutive chunks of at most ``max_datums`` datums (and about ``max_bytes`` each)."""
    chunks: list[list[Datum]] = []
    current: list[Datum] = []
    size = 0
    for datum in data:
        cost = _estimated_bytes(datum)
        if current and (len(current) == max_datums or size + cost > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append(datum)
        size += cost
    if current:
        chunks.append(current)
    return chunks


def merge_metrics(metrics: Sequence[dict[str, float]], weights: Sequence[int]) -> dict[str, float]:
    """One metrics dict from per-chunk ones; ``weights`` (datums per chunk) weight the means.

    A key missing from some chunk, or with an unknown reduction, keeps the first chunk's value.
    """
    merged: dict[str, float] = {}
    keys = dict.fromkeys(key for m in metrics for key in m)
    for key in keys:
        values = [m[key] for m in metrics if key in m]
        reduction = key.rpartition(":")[2] if ":" in key else ""
        if len(values) != len(metrics) or reduction not in ("sum", "mean", "min", "max"):
            merged[key] = values[0]
        elif reduction == "sum":
            merged[key] = float(sum(values))
        elif reduction == "min":
            merged[key] = float(min(values))
        elif reduction == "max":
            merged[key] = float(max(values))
        else:
            total = sum(weights)
            merged[key] = (
                float(sum(v * w for v, w in zip(values, weights, strict=True)) / total)
                if total
                else float(sum(values) / len(values))
            )
    return merged


def merge_outputs(results: Sequence[ForwardBackwardOutput]) -> ForwardBackwardOutput:
    """The result of a whole batch from its chunks' results, in datum order."""
    if not results:
        return ForwardBackwardOutput(loss_fn_output_type="", loss_fn_outputs=[], metrics={})
    if len(results) == 1:
        return results[0]
    return ForwardBackwardOutput(
        loss_fn_output_type=results[0].loss_fn_output_type,
        loss_fn_outputs=[out for result in results for out in result.loss_fn_outputs],
        metrics=merge_metrics(
            [r.metrics for r in results], [len(r.loss_fn_outputs) for r in results]
        ),
    )
