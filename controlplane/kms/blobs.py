"""A tenant's small blobs sealed and opened in the control plane itself (a request's images, a
recording's image digests): one envelope each, under the encryption context that names the
blob (``sealing_context``). Errors are the key ring's (``KmsError``: the key service failed;
its subclasses: the key or the blob is wrong); each caller says what they mean for it."""

from __future__ import annotations

from controlplane.tenants.models import Tenant

from . import providers
from .envelope import is_sealed, open_bytes, seal_bytes
from .keyring import KeyRef, TamperedError
from .selectors import key_ref_by_arn
from .services import sealing_context


def seal_blob(*, tenant: Tenant, sealing: dict, body: bytes) -> bytes:
    """``body`` sealed as ``sealing`` says (``save_sealing``'s key and context)."""
    key = key_ref_by_arn(tenant_id=tenant.pk, arn=sealing["key_arn"])
    return seal_bytes(body, key=key, provider=providers.provider(key), context=sealing["context"])


def open_blob(*, tenant: Tenant, resource: str, sealed: bytes) -> bytes:
    """What ``seal_blob`` sealed for ``resource`` of ``tenant``; ``TamperedError`` when it is
    not an envelope, or one for another blob."""

    def lookup(arn: str) -> KeyRef:
        return key_ref_by_arn(tenant_id=tenant.pk, arn=arn)

    if not is_sealed(sealed):
        raise TamperedError("the stored blob is not sealed")
    return open_bytes(
        sealed,
        key_lookup=lookup,
        provider_for_key=providers.provider,
        expected_context=sealing_context(tenant, resource),
    )
