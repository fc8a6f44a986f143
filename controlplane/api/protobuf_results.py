"""Operation results as the protobuf messages tinker SDK ≥ 0.25 insists on: a sample's
``SampleResponse`` and a forward(-backward)'s ``ForwardBackwardOutput``, encoded from the JSON
result the worker stored (the same JSON a JSON client gets)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from loopwright.proto import pb
from loopwright.proto.fwdbwd import tensor_to_proto
from loopwright.types import TensorData

__all__ = ["PROTOBUF_KINDS", "encode_result"]

MASK_LOGPROB = -99999.0  # an empty top-k cell, as the SDK reads it (token 0, this logprob)
_STOP = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}
_FIELD_DTYPES = {"float32": (pb.DTYPE_FLOAT32, "<f4"), "int64": (pb.DTYPE_INT64, "<i8")}


def _floats(values: Sequence[float | None]) -> bytes:
    """float32 bytes; a missing value (None) is NaN, as the SDK reads it."""
    return np.array([math.nan if v is None else v for v in values], dtype="<f4").tobytes()


def _topk(rows: Any, msg: Any) -> None:
    """Top-k logprobs into a ``TopkLogprobs``: dense N×K, empty cells (0, -99999.0).

    ``rows`` is a list with, per position, None or ``[[token, logprob], ...]``; or the dense
    ``{"token_ids": [[...]], "logprobs": [[...]]}`` pair."""
    if isinstance(rows, dict):
        ids = np.asarray(rows["token_ids"], dtype="<i4")
        lps = np.asarray(rows["logprobs"], dtype="<f4")
    else:
        k = max((len(r) for r in rows if r), default=0)
        ids = np.zeros((len(rows), k), dtype="<i4")
        lps = np.full((len(rows), k), MASK_LOGPROB, dtype="<f4")
        for i, row in enumerate(rows):
            for j, pair in enumerate(row or ()):
                token, logprob = (
                    (pair["token_id"], pair["logprob"]) if isinstance(pair, dict) else pair
                )
                ids[i, j], lps[i, j] = token, logprob
    length, k = (ids.shape[0], ids.shape[1]) if ids.ndim == 2 else (0, 0)
    msg.token_ids, msg.logprobs, msg.k, msg.length = ids.tobytes(), lps.tobytes(), k, length


def _tensor(value: Any, msg: Any) -> None:
    tensor_to_proto(TensorData.model_validate(value), msg)


def sample_to_proto(result: dict) -> bytes:
    """A sample operation's JSON result as a serialized ``SampleResponse``."""
    out = pb.SampleResponse(prompt_cache_hit_tokens=int(result.get("prompt_cache_hit_tokens") or 0))
    for seq in result.get("sequences") or ():
        msg = out.sequences.add(stop_reason=_STOP[seq.get("stop_reason", "length")])
        msg.tokens = np.asarray(seq.get("tokens") or [], dtype="<i4").tobytes()
        if seq.get("logprobs") is not None:
            msg.logprobs = _floats(seq["logprobs"])
        topk = seq.get("topk_logprobs", seq.get("topk_sampled_logprobs"))
        if topk is not None:
            _topk(topk, msg.topk_sampled_logprobs)
    if result.get("prompt_logprobs") is not None:
        out.prompt_logprobs = _floats(result["prompt_logprobs"])
    if result.get("topk_prompt_logprobs") is not None:
        _topk(result["topk_prompt_logprobs"], out.topk_prompt_logprobs)
    if result.get("target_prompt_logprobs") is not None:
        _tensor(result["target_prompt_logprobs"], out.target_prompt_logprobs)
    alt = result.get("prompt_alt_tokens")
    if alt is not None:
        _tensor(alt["tokens"], out.prompt_alt_tokens.tokens)
        _tensor(alt["logprobs"], out.prompt_alt_tokens.logprobs)
    return out.SerializeToString()


def _signature(output: dict) -> tuple:
    """What datums of one ArrayRecord share: field names, dtypes and trailing shapes."""
    sig = []
    for name in sorted(output):
        value = output[name]
        shape = value.get("shape") or [len(value["data"])]
        sig.append((name, value["dtype"], tuple(shape[1:])))
    return tuple(sig)


def _record(outputs: list[dict], type_tag: str, msg: Any) -> None:
    msg.type_tag, msg.num_datums = type_tag, len(outputs)
    for name, dtype, trailing in _signature(outputs[0]):
        proto_dtype, np_dtype = _FIELD_DTYPES[dtype]
        arrays = [np.asarray(o[name]["data"], dtype=np_dtype) for o in outputs]
        offsets = np.zeros(len(arrays) + 1, dtype="<i8")
        offsets[1:] = np.cumsum([a.nbytes for a in arrays])
        field = msg.fields[name]
        field.data = b"".join(a.tobytes() for a in arrays)
        field.offsets = offsets.tobytes()
        field.dtype = proto_dtype
        field.trailing_shape.extend(trailing)


def forward_backward_to_proto(result: dict) -> bytes:
    """A forward(-backward) operation's JSON result as a serialized ``ForwardBackwardOutput``:
    consecutive datums with the same fields and trailing shapes share one ArrayRecord."""
    kind = str(result.get("loss_fn_output_type") or "ArrayRecord")
    out = pb.ForwardBackwardOutput(loss_fn_output_type=kind)
    for name, value in (result.get("metrics") or {}).items():
        out.metrics[name] = float(value)
    outputs = list(result.get("loss_fn_outputs") or ())
    start = 0
    while start < len(outputs):
        sig, end = _signature(outputs[start]), start + 1
        while end < len(outputs) and _signature(outputs[end]) == sig:
            end += 1
        _record(outputs[start:end], kind, out.loss_fn_outputs.add())
        start = end
    return out.SerializeToString()


PROTOBUF_KINDS = {
    "sample": sample_to_proto,
    "forward": forward_backward_to_proto,
    "forward_backward": forward_backward_to_proto,
}
"""Operation kinds whose result the protocol carries as protobuf, and their encoders."""


def encode_result(kind: str, result: dict) -> bytes:
    """The protobuf body of a finished operation's ``result`` (a kind in PROTOBUF_KINDS)."""
    return PROTOBUF_KINDS[kind](result)
