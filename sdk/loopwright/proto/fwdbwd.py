"""A forward(-backward) request as the protobuf body the Tinker protocol sends since SDK 0.25,
zstd-compressed, from the SDK's own wire types."""

from __future__ import annotations

from typing import Any

import numpy as np
import zstandard

from ..types import (
    Datum,
    ForwardBackwardInput,
    PromptProvenanceSpan,
    SampledProvenanceSpan,
    TensorData,
)
from ..types.chunks import EncodedTextChunk, ImageChunk
from . import pb

__all__ = ["encode_forward_backward", "tensor_to_proto"]

_DTYPES = {"float32": (pb.DTYPE_FLOAT32, "<f4"), "int64": (pb.DTYPE_INT64, "<i8")}


def tensor_to_proto(tensor: TensorData, msg: Any) -> None:
    """Write ``tensor`` into the ``Tensor`` message ``msg``: raw little-endian values."""
    dtype, np_dtype = _DTYPES[tensor.dtype]
    msg.dtype = dtype
    if tensor.shape is not None:
        msg.shape.extend(tensor.shape)
    values = np.asarray(tensor.data, dtype=np_dtype)
    if tensor.is_sparse:
        msg.sparse_csr.values = values.tobytes()
        msg.sparse_csr.crow_indices = np.asarray(tensor.sparse_crow_indices, "<i8").tobytes()
        msg.sparse_csr.col_indices = np.asarray(tensor.sparse_col_indices, "<i8").tobytes()
    else:
        msg.dense = values.tobytes()


def _datum_to_proto(datum: Datum, msg: Any) -> None:
    for chunk in datum.model_input.chunks:
        if isinstance(chunk, EncodedTextChunk):
            msg.model_input.add().encoded_text.tokens = np.asarray(chunk.tokens, "<i4").tobytes()
        elif isinstance(chunk, ImageChunk):
            image = msg.model_input.add().image
            image.data, image.format = chunk.data, chunk.format
            if chunk.expected_tokens is not None:
                image.expected_tokens = chunk.expected_tokens
            if chunk.override_dimensions is not None:
                image.override_dimensions.width = chunk.override_dimensions.width
                image.override_dimensions.height = chunk.override_dimensions.height
        else:
            raise ValueError(f"{chunk.type} chunks are not sent as protobuf")
    for name, tensor in datum.loss_fn_inputs.items():
        tensor_to_proto(tensor, msg.loss_fn_inputs[name])
    for span in datum.model_input_spans or ():
        _span_to_proto(span, msg.model_input_spans.add())
    for span in datum.loss_fn_input_spans or ():
        _span_to_proto(span, msg.loss_fn_input_spans.add())


def _span_to_proto(span: PromptProvenanceSpan | SampledProvenanceSpan, msg: Any) -> None:
    """A span as the ``ProvenanceSpan`` oneof arm its ``type`` names."""
    arm = getattr(msg, span.type)
    arm.sequence_id, arm.offset, arm.length = span.sequence_id, span.offset, span.length


def encode_forward_backward(
    model_id: str,
    seq_id: int,
    batch: ForwardBackwardInput,
    *,
    forward_only: bool = False,
    compress: bool = True,
    level: int = 3,
) -> bytes:
    """The protobuf body of one forward (``forward_only``) or forward_backward request,
    zstd-compressed unless ``compress`` is off. Config values go into both config maps, as the
    tinker SDK writes them."""
    msg = pb.ForwardBackwardRequest(
        model_id=model_id, seq_id=seq_id, loss_fn=batch.loss_fn, forward_only=forward_only
    )
    for key, value in (batch.loss_fn_config or {}).items():
        if isinstance(value, str):
            msg.loss_fn_config_v2[key].text = value
        else:
            msg.loss_fn_config[key] = float(value)
            msg.loss_fn_config_v2[key].number = float(value)
    for datum in batch.data:
        _datum_to_proto(datum, msg.data.add())
    raw = msg.SerializeToString()
    return zstandard.ZstdCompressor(level=level).compress(raw) if compress else raw
