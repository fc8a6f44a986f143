"""Protobuf request bodies (tinker SDK ≥ 0.25): ``forward_backward`` as a ``ForwardBackwardRequest``
message, optionally zstd-compressed, decoded into the same JSON shape a JSON client sends, so
one validation (the SDK's wire types) serves both protocols.

Decompression stops at ``LOOPWRIGHT_MAX_REQUEST_BYTES`` (413 naming it); malformed bytes,
truncated frames, unknown dtypes and odd byte lengths are 400s naming the field. Provenance spans
become the JSON spans of ``loopwright.types.provenance``.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import zstandard
from django.conf import settings
from google.protobuf.message import DecodeError
from rest_framework.parsers import BaseParser

from controlplane.errors import DomainError, PayloadTooLarge
from loopwright.proto import PROTOBUF_MEDIA_TYPES, pb

__all__ = [
    "ProtobufAliasParser",
    "ProtobufBodyError",
    "ProtobufParser",
    "decode_forward_backward",
    "is_protobuf",
]

# proto dtype → (numpy dtype of the bytes, wire dtype): int32 widens to int64 and bfloat16 to
# float32, as the tinker SDK widens them on its side
_DTYPES: dict[int, tuple[str, str]] = {
    pb.DTYPE_FLOAT32: ("<f4", "float32"),
    pb.DTYPE_INT64: ("<i8", "int64"),
    pb.DTYPE_INT32: ("<i4", "int64"),
    pb.DTYPE_BFLOAT16: ("<u2", "float32"),
}


class ProtobufBodyError(DomainError):
    """A protobuf body that parsed but does not hold a valid request; it names the model,
    ``seq_id`` and operation kind it was for, so the refusal can still take that ``seq_id``."""

    def __init__(
        self, detail: str, *, field: str | None, model_id: str | None, seq_id: int, kind: str
    ) -> None:
        super().__init__(detail, field=field)
        self.model_id = model_id
        self.seq_id = seq_id
        self.kind = kind


def is_protobuf(request: Any) -> bool:
    """Whether ``request``'s body is protobuf (by its Content-Type)."""
    media = (request.META.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    return media in PROTOBUF_MEDIA_TYPES


def decompressed(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` as sent: ``identity`` or ``zstd``, at most ``limit`` bytes once decompressed."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "zstd":
        raise DomainError(
            f"Content-Encoding {encoding!r} is not supported (zstd or none)",
            field="Content-Encoding",
        )
    too_large = PayloadTooLarge(
        f"the request body decompresses to more than the limit of {limit} bytes",
        field="Content-Encoding",
    )
    try:
        declared = zstandard.frame_content_size(body)
    except zstandard.ZstdError:
        raise DomainError("the body is not a zstd frame", field="Content-Encoding") from None
    if declared > limit:
        raise too_large
    try:
        if declared >= 0:
            return zstandard.ZstdDecompressor().decompress(body, max_output_size=limit)
        # no size in the frame header: read at most one byte past the limit
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body))
        data = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise DomainError(
            f"the zstd body could not be decompressed ({exc}): truncated or corrupt",
            field="Content-Encoding",
        ) from None
    if len(data) > limit:
        raise too_large
    try:  # a frame that ends early reads short without an error: check it whole
        zstandard.ZstdDecompressor().decompress(body, max_output_size=len(data))
    except zstandard.ZstdError:
        raise DomainError(
            "the zstd body is truncated (the frame does not end)", field="Content-Encoding"
        ) from None
    return data


def _array(raw: bytes, np_dtype: str, field: str, fail) -> np.ndarray:
    size = np.dtype(np_dtype).itemsize
    if len(raw) % size:
        raise fail(f"{field}: {len(raw)} bytes is not a whole number of {size}-byte values", field)
    return np.frombuffer(raw, dtype=np_dtype)


def _tensor(msg: Any, field: str, fail) -> dict:
    if msg.dtype not in _DTYPES:
        name = pb.DType.Name(msg.dtype) if msg.dtype in pb.DType.values() else str(msg.dtype)
        raise fail(f"{field}.dtype: {name} is not a tensor dtype (float32 or int64)", field)
    np_dtype, dtype = _DTYPES[msg.dtype]
    sparse = msg.WhichOneof("encoding") == "sparse_csr"
    raw = msg.sparse_csr.values if sparse else msg.dense
    values = _array(raw, np_dtype, f"{field}.data", fail)
    if msg.dtype == pb.DTYPE_BFLOAT16:
        values = (values.astype(np.uint32) << 16).view(np.float32)
    if dtype == "float32" and not np.isfinite(values).all():
        raise fail(f"{field}.data: values must be finite (no NaN or infinity)", f"{field}.data")
    out: dict = {"data": values.tolist(), "dtype": dtype}
    if len(msg.shape):
        out["shape"] = list(msg.shape)
    if sparse:
        for name in ("crow_indices", "col_indices"):
            indices = getattr(msg.sparse_csr, name)
            out[f"sparse_{name}"] = _array(indices, "<i8", f"{field}.{name}", fail).tolist()
    return out


def _chunk(msg: Any, field: str, fail) -> dict:
    kind = msg.WhichOneof("chunk")
    if kind == "encoded_text":
        tokens = _array(msg.encoded_text.tokens, "<i4", f"{field}.tokens", fail)
        return {"type": "encoded_text", "tokens": tokens.tolist()}
    if kind == "image":
        image: dict = {"type": "image", "data": msg.image.data, "format": msg.image.format}
        if msg.image.HasField("expected_tokens"):
            image["expected_tokens"] = msg.image.expected_tokens
        if msg.image.HasField("override_dimensions"):
            dims = msg.image.override_dimensions
            image["override_dimensions"] = {"width": dims.width, "height": dims.height}
        return image
    what = "audio (dmel) chunks are" if kind == "dmel" else "an empty chunk is"
    raise fail(f"{field}: {what} not supported", field)


def _spans(msgs: Any, field: str) -> list[dict]:
    """Provenance spans as their JSON form (``loopwright.types.provenance``); an unset arm is
    kept as such, for the wire types to refuse by name."""
    spans = []
    for msg in msgs:
        arm = msg.WhichOneof("span")
        if arm is None:
            spans.append({"type": None})
            continue
        span = getattr(msg, arm)
        spans.append(
            {
                "type": arm,
                "sequence_id": span.sequence_id,
                "offset": span.offset,
                "length": span.length,
            }
        )
    return spans


def decode_forward_backward(raw: bytes) -> dict:
    """A ``ForwardBackwardRequest`` message as the JSON body of the request it stands for: a
    ``ForwardRequest`` (``forward_input``) when ``forward_only`` is set, else a
    ``ForwardBackwardRequest`` (``forward_backward_input``)."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(raw)
    except DecodeError as exc:
        raise DomainError(f"the body is not a ForwardBackwardRequest message ({exc})") from None
    if "\x00" in msg.model_id:  # no database column can store it: nothing to take a seq_id of
        raise DomainError("model_id: must not contain NUL", field="model_id")
    model_id, seq_id = msg.model_id or None, msg.seq_id
    kind = "forward" if msg.forward_only else "forward_backward"

    def fail(detail: str, field: str) -> ProtobufBodyError:
        return ProtobufBodyError(detail, field=field, model_id=model_id, seq_id=seq_id, kind=kind)

    texts = [msg.loss_fn, *msg.loss_fn_config, *msg.loss_fn_config_v2]
    texts += [v.text for v in msg.loss_fn_config_v2.values()]
    texts += [name for datum in msg.data for name in datum.loss_fn_inputs]
    texts += [
        getattr(span, span.WhichOneof("span") or "prompt_tokens").sequence_id
        for datum in msg.data
        for span in (*datum.model_input_spans, *datum.loss_fn_input_spans)
    ]
    if any("\x00" in t for t in texts):
        raise fail("text in the message must not contain NUL", "forward_backward_input")

    key = "forward_input" if msg.forward_only else "forward_backward_input"
    data = []
    for i, datum in enumerate(msg.data):
        at = f"{key}.data[{i}]"
        chunks = [
            _chunk(c, f"{at}.model_input.chunks[{j}]", fail)
            for j, c in enumerate(datum.model_input)
        ]
        inputs = {
            name: _tensor(t, f"{at}.loss_fn_inputs.{name}", fail)
            for name, t in datum.loss_fn_inputs.items()
        }
        entry: dict = {"model_input": {"chunks": chunks}, "loss_fn_inputs": inputs}
        if datum.model_input_spans or datum.loss_fn_input_spans:  # provenance: both or neither
            entry["model_input_spans"] = _spans(datum.model_input_spans, f"{at}.model_input_spans")
            entry["loss_fn_input_spans"] = _spans(
                datum.loss_fn_input_spans, f"{at}.loss_fn_input_spans"
            )
        data.append(entry)
    # the v2 map (numbers and strings) wins where both are set, as the SDK intends
    config: dict[str, Any] = dict(msg.loss_fn_config)
    for name, value in msg.loss_fn_config_v2.items():
        config[name] = value.text if value.WhichOneof("value") == "text" else value.number
    for name, value in config.items():
        if isinstance(value, float) and not np.isfinite(value):
            raise fail(f"{key}.loss_fn_config.{name}: must be finite", f"{key}.loss_fn_config")
    batch = {"data": data, "loss_fn": msg.loss_fn, "loss_fn_config": config or None}
    return {"model_id": model_id, "seq_id": seq_id, key: batch}


class ProtobufParser(BaseParser):
    """DRF parser for ``application/x-protobuf`` bodies."""

    media_type = "application/x-protobuf"

    def parse(self, stream, media_type=None, parser_context=None) -> dict:
        request = parser_context["request"]
        limit = settings.MAX_REQUEST_BYTES
        body = stream.read() if stream is not None else b""
        raw = decompressed(body, request.META.get("HTTP_CONTENT_ENCODING", ""), limit)
        return decode_forward_backward(raw)


class ProtobufAliasParser(ProtobufParser):
    """The same, for ``application/protobuf`` (which some clients send)."""

    media_type = "application/protobuf"
