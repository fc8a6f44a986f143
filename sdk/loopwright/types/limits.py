"""Bounds of the wire's values, one type per kind of field, so that a bad value is refused where
it is validated (by the client before it sends, by the server when it arrives) and the OpenAPI
document states each bound. docs/limits.md lists them all.

Integers fit in int64 and most in int32 (tinker's protobuf carries ``seq_id`` and token ids as
int32); floats are finite (the server's JSON parser also refuses ``NaN``, ``Infinity`` and
overflowing literals such as ``1e999``); ids are non-empty; strings and lists are bounded.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator, Field

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DATUMS",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_REPLICAS",
    "MAX_TAGS",
    "MAX_TTL_SECONDS",
    "Arn",
    "BaseModelName",
    "CheckpointName",
    "ContextLength",
    "Counter",
    "FiniteFloat",
    "Id",
    "Int64",
    "Metadata",
    "NonNegativeInt32",
    "Replicas",
    "Seed",
    "SeqId",
    "ShortText",
    "StrMetadata",
    "Tag",
    "TinkerPath",
    "TokenId",
    "TtlSeconds",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_DATUMS = 1024  # per forward(-backward) request: the tinker SDKs' chunk length
MAX_TAGS = 64
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_DEPTH = 8
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600  # ten years
MAX_REPLICAS = 1024  # data-parallel workers of one training model (the server's quota is lower)

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
"""Any integer that fits in 64 bits."""

NonNegativeInt32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
"""0 to 2^31 − 1."""

SeqId = Annotated[int, Field(ge=1, le=INT32_MAX)]
"""A training request's counter: 1 to 2^31 − 1 (the server also bounds it to a window ahead
of the request its model runs next)."""

Counter = Annotated[int, Field(ge=0, le=INT32_MAX)]
"""A client's counter of models, samplers or sample requests in its session: 0 to 2^31 − 1."""

ContextLength = Annotated[int, Field(ge=1, le=INT32_MAX)]
"""A context length in tokens: 1 to 2^31 − 1 on the wire; the base model's maximum bounds it
further (get_server_capabilities' max_context_length)."""

TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
"""A token id: 0 to 2^31 − 1 on the wire; the base model's vocabulary bounds it further."""

Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
"""A random seed: any int64."""

Replicas = Annotated[int, Field(ge=1, le=MAX_REPLICAS)]
"""Data-parallel workers of a training model: 1 to 1,024 (the account's quota bounds it
further, 8 by default)."""

TtlSeconds = Annotated[int, Field(ge=1, le=MAX_TTL_SECONDS)]
"""A lifetime in seconds: 1 s to ten years."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
"""A finite number."""

Id = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""An id the server issued (session, model, sampler, request): 1 to 128 characters, no
control characters."""

BaseModelName = Annotated[str, Field(min_length=1, max_length=200)]
"""A base model's name: 1 to 200 characters."""

TinkerPath = Annotated[str, Field(min_length=1, max_length=1024)]
"""A ``tinker://`` path or a model package version's ARN: 1 to 1,024 characters."""

Arn = Annotated[str, Field(min_length=1, max_length=2048)]
"""An ARN (or a key id or alias where one is taken): 1 to 2,048 characters."""

ShortText = Annotated[str, Field(max_length=200)]
"""A name or label: at most 200 characters."""

Tag = Annotated[str, Field(max_length=256)]
"""A session tag: at most 256 characters."""


def _bounded_json(value: Any) -> Any:
    """Free-form JSON: at most ``MAX_METADATA_BYTES`` as compact JSON and ``MAX_METADATA_DEPTH``
    levels deep, finite numbers, integers within int64."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_METADATA_DEPTH:
                raise ValueError(f"nested more than {MAX_METADATA_DEPTH} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite")
        elif type(item) is int and not INT64_MIN <= item <= INT64_MAX:
            raise ValueError("integers must fit in 64 bits")
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"{size} bytes as JSON; at most {MAX_METADATA_BYTES}")
    return value


Metadata = Annotated[dict[str, Any], AfterValidator(_bounded_json)]
"""Free-form user metadata: a JSON object of at most 16 KiB, 8 levels deep."""

StrMetadata = Annotated[dict[str, str], AfterValidator(_bounded_json)]
"""A checkpoint's user metadata: string values, at most 16 KiB as JSON."""

CheckpointName = Annotated[str, Field(max_length=128)]
"""A checkpoint's name: 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or
digit (empty: a name the server chooses)."""
