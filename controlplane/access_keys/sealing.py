"""A secret access key and its sealed form: 32 random bytes, wrapped under the service's KMS
master key (``controlplane.kms.providers.master_key``) and bound to the key's ARN, so a sealed
secret copied onto another key's row does not open. The secret is those bytes in base64."""

from __future__ import annotations

import base64
import os

from controlplane.iam.resources import build_arn
from controlplane.kms.keyring import KEY_SIZE
from controlplane.kms.providers import master_key

SEAL_VERSION = 1  # the wrapping's version, bound into what it authenticates


def access_key_arn(account_id: str, access_key_id: str) -> str:
    return build_arn("iam", account_id, "access-key", access_key_id)


def secret_new(*, account_id: str, access_key_id: str) -> tuple[str, bytes]:
    """A fresh secret access key (43 characters) and its sealed form."""
    material = os.urandom(KEY_SIZE)
    sealed = master_key().wrap_material(
        material, key_arn=access_key_arn(account_id, access_key_id), version=SEAL_VERSION
    )
    return _encoded(material), sealed


def secret_open(*, account_id: str, access_key_id: str, sealed: bytes) -> str:
    """The secret access key; ``TamperedError`` if the sealed form is not this key's (another
    master key, or altered)."""
    material = master_key().unwrap_material(
        bytes(sealed), key_arn=access_key_arn(account_id, access_key_id), version=SEAL_VERSION
    )
    return _encoded(material)


def _encoded(material: bytes) -> str:
    return base64.b64encode(material).decode("ascii").rstrip("=")
