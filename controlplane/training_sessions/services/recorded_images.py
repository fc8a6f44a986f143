"""The images of a recorded sample's prompt, kept sealed with the tenant's KMS key (the
session's ``kms_key_arn``, else the tenant's default key), never in clear: one LWENC1 envelope
per recording whose encryption context names the tenant and the recording. A training request
that cites the recording opens it to compare the images it sends with the recorded ones."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass

from controlplane.errors import DomainError
from controlplane.kms.blobs import open_blob, seal_blob
from controlplane.kms.keyring import KmsError
from controlplane.kms.services import save_sealing
from controlplane.tenants.models import Tenant

__all__ = [
    "IMAGE_POSITION",
    "RecordedImage",
    "image_digest",
    "prompt_layout",
    "recorded_images_open",
    "recorded_images_seal",
]

IMAGE_POSITION = -1
"""What a recorded prompt holds at each position an image takes (never a token id)."""


@dataclass(frozen=True)
class RecordedImage:
    """One image of a recorded prompt: the positions it takes and what identifies its bytes."""

    offset: int
    length: int
    digest: bytes


def is_image(chunk: dict) -> bool:
    return chunk.get("type", "encoded_text") != "encoded_text"


def image_digest(chunk: dict) -> bytes:
    """SHA-256 of an image chunk's format, override dimensions and decoded bytes: two chunks
    agree exactly when the model sees the same image."""
    data = chunk.get("data") or ""
    raw = base64.b64decode(data) if isinstance(data, str) else bytes(data)
    head = json.dumps(
        [chunk.get("format"), chunk.get("override_dimensions")], sort_keys=True
    ).encode()
    return hashlib.sha256(head + b"\0" + raw).digest()


def prompt_layout(chunks: list[dict]) -> tuple[list[int], list[dict]]:
    """A prompt's positions (token ids, ``IMAGE_POSITION`` where an image is) and its images
    (``offset``, ``length`` and the chunk's own fields)."""
    tokens: list[int] = []
    images: list[dict] = []
    for chunk in chunks:
        if not is_image(chunk):
            tokens.extend(chunk["tokens"])
            continue
        length = int(chunk.get("expected_tokens") or 0)
        images.append(
            {
                "offset": len(tokens),
                "length": length,
                "format": chunk.get("format"),
                "data": chunk.get("data"),
                "override_dimensions": chunk.get("override_dimensions"),
            }
        )
        tokens.extend([IMAGE_POSITION] * length)
    return tokens, images


def _resource(recording_id: str) -> str:
    return f"recording {recording_id}"


def recorded_images_seal(
    *, tenant: Tenant, key_arn: str | None, recording_id: str, images: list[dict]
) -> bytes:
    """``images`` (``prompt_layout``'s) sealed with the session's key (``key_arn``) or the
    tenant's default one. Raises ``DomainError`` (the key is not Enabled) or ``KmsError``."""
    sealing = save_sealing(tenant=tenant, key_arn=key_arn, resource=_resource(recording_id))
    body = json.dumps(images, sort_keys=True, separators=(",", ":")).encode()
    return seal_blob(tenant=tenant, sealing=sealing, body=body)


def recorded_images_open(
    *, tenant: Tenant, recording_id: str, sealed: bytes, field: str
) -> tuple[RecordedImage, ...]:
    """The images a recording sealed (their positions and digests), refused with a 400 naming
    ``field`` when its key can no longer open them."""
    if not sealed:
        return ()
    resource = _resource(recording_id)
    try:
        body = open_blob(tenant=tenant, resource=resource, sealed=sealed)
    except KmsError as exc:
        raise DomainError(
            f"{field}: the images of {resource} cannot be opened: {exc}", field=field
        ) from exc
    return tuple(
        RecordedImage(int(i["offset"]), int(i["length"]), image_digest(i)) for i in json.loads(body)
    )
