"""The protobuf schema of the Tinker protocol (SDK ≥ 0.25), as the tinker SDK publishes it.

``tinker_public_pb2`` is tinker 0.38.0's generated file (Apache-2.0, ``LICENSE`` beside it),
loaded into a descriptor pool of its own; ``fwdbwd`` encodes a forward_backward request with it.
"""

from __future__ import annotations

from . import tinker_public_pb2 as pb

__all__ = ["PROTOBUF_MEDIA_TYPES", "SCHEMA_VERSION", "pb"]

SCHEMA_VERSION = "tinker 0.38.0"
"""The tinker SDK release the vendored schema was taken from (unchanged since 0.34)."""

PROTOBUF_MEDIA_TYPES = ("application/x-protobuf", "application/protobuf")
"""Media types that name a protobuf body."""
