"""The images of a stored request, sealed with the tenant's KMS key, never in clear.

An operation whose request holds image chunks (``forward``, ``forward_backward``, ``sample``,
``compute_logprobs``, a chat completion's prompt) is stored with each image's ``data`` replaced
by ``{"sealed_image": i}``, the image's place in one LWENC1 envelope per operation
(``Operation.sealed_images``) sealed with the session's ``kms_key_arn`` (else the tenant's
default key), its encryption context naming the tenant and the operation. The request's digest
(``payload_digest``) is taken over the clear request, so a retry still matches. The worker opens
the images (``payload_open``) before the engine sees the request, when it runs and when it
replays it after a failover.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

from controlplane.errors import DomainError
from controlplane.kms.blobs import open_blob, seal_blob
from controlplane.kms.keyring import KmsError
from controlplane.kms.services import KmsUnavailable, save_sealing
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Operation, Session, new_id

__all__ = ["REF", "fields_sealed", "op_sealed", "payload_open", "payload_seal"]

REF = "sealed_image"
"""The key of the reference an image's stored ``data`` becomes: its index in the envelope."""


def _resource(op_id: str) -> str:
    return f"operation {op_id}"


def _image_chunks(node: object) -> Iterator[dict]:
    """Every image chunk anywhere in a request (``ModelInput`` chunks of any field)."""
    if isinstance(node, dict):
        if node.get("type") == "image" and "data" in node:
            yield node
            return
        for value in node.values():
            yield from _image_chunks(value)
    elif isinstance(node, list):
        for value in node:
            yield from _image_chunks(value)


def _is_ref(data: object) -> bool:
    return isinstance(data, dict) and set(data) == {REF}


def payload_seal(
    *, tenant: Tenant, session: Session, op_id: str, payload: dict
) -> tuple[dict, bytes]:
    """The payload to store (each image's ``data`` a reference) and the sealed images (``b""``
    and the payload itself when it holds none). Refused with a 400 naming ``kms_key_arn`` when
    the key is not Enabled, a 503 when the key service cannot be reached: never stored in
    clear instead."""
    if not any(True for _ in _image_chunks(payload)):
        return payload, b""
    stored = copy.deepcopy(payload)
    images: list[object] = []
    for chunk in _image_chunks(stored):
        images.append(chunk["data"])
        chunk["data"] = {REF: len(images) - 1}
    resource = _resource(op_id)
    sealing = save_sealing(
        tenant=tenant, key_arn=(session.platform or {}).get("kms_key_arn"), resource=resource
    )
    body = json.dumps(images, separators=(",", ":")).encode()
    try:
        sealed = seal_blob(tenant=tenant, sealing=sealing, body=body)
    except KmsError as exc:
        if type(exc) is KmsError:  # the key service failed, not the key
            raise KmsUnavailable(
                f"the images of the request cannot be sealed now: {exc}", field="kms_key_arn"
            ) from exc
        raise DomainError(
            f"the images of the request cannot be sealed with KMS key {sealing['key_arn']}: {exc}",
            field="kms_key_arn",
        ) from exc
    return stored, sealed


def fields_sealed(fields: dict) -> dict:
    """An operation's insert ``fields`` (``tenant``, ``session``, ``payload``, maybe ``id``)
    with its images sealed: an ``id`` chosen now when it has none (the envelope names it)."""
    op_id = fields.get("id") or new_id("req")
    stored, sealed = payload_seal(
        tenant=fields["tenant"], session=fields["session"], op_id=op_id, payload=fields["payload"]
    )
    if not sealed:
        return fields
    return {**fields, "id": op_id, "payload": stored, "sealed_images": sealed}


def op_sealed(op: Operation) -> None:
    """Seal the images of ``op`` (not inserted yet, its ``id`` set) in place."""
    op.payload, op.sealed_images = payload_seal(
        tenant=op.tenant, session=op.session, op_id=op.pk, payload=op.payload
    )


def payload_open(op: Operation) -> dict:
    """``op``'s request as it was sent, its images opened (the payload itself when it holds no
    sealed image). Raises ``DomainError`` (400, naming ``kms_key_arn``) when the key can no
    longer open them, ``KmsUnavailable`` when the key service cannot be reached."""
    payload = op.payload
    if not op.sealed_images:  # most requests: no image, nothing to walk
        return payload
    sealed = bytes(op.sealed_images)
    refs = [c for c in _image_chunks(payload) if _is_ref(c["data"])]
    if not refs:
        return payload
    resource = _resource(op.pk)
    tenant = Tenant.objects.get(pk=op.tenant_id)
    try:
        body = open_blob(tenant=tenant, resource=resource, sealed=sealed)
    except KmsError as exc:
        if type(exc) is KmsError:
            raise KmsUnavailable(
                f"the images of {resource} cannot be opened now: {exc}", field="kms_key_arn"
            ) from exc
        raise DomainError(
            f"the images of {resource} cannot be opened: {exc}", field="kms_key_arn"
        ) from exc
    images = json.loads(body)
    clear = copy.deepcopy(payload)
    for chunk in _image_chunks(clear):
        if _is_ref(chunk["data"]):
            chunk["data"] = images[int(chunk["data"][REF])]
    return clear
