"""A budget webhook's signing secret: 32 random bytes shown once as ``whsec_…``, kept only
sealed under the service's KMS master key and bound to the budget's ARN (the server must sign
with the secret itself, so a digest would not do)."""

from __future__ import annotations

import base64
import os

from controlplane.iam.resources import build_arn
from controlplane.kms.keyring import KEY_SIZE, MasterKey, TamperedError
from controlplane.kms.providers import master_key

SEAL_VERSION = 1
PREFIX = "whsec_"
HINT = 10  # characters of the secret the API and the dashboard show after it is made


def _arn(account_id: str, name: str) -> str:
    return build_arn("billing", account_id, "budget", name)


def secret_new(*, account_id: str, name: str) -> tuple[str, bytes]:
    """A fresh secret (shown once) and its sealed form."""
    material = os.urandom(KEY_SIZE)
    sealed = master_key().wrap_material(
        material, key_arn=_arn(account_id, name), version=SEAL_VERSION
    )
    return _encoded(material), sealed


def secret_open(*, account_id: str, name: str, sealed: bytes) -> str:
    """The secret; ``TamperedError`` if the sealed form is not this budget's."""
    material = master_key().unwrap_material(
        bytes(sealed), key_arn=_arn(account_id, name), version=SEAL_VERSION
    )
    return _encoded(material)


def secrets_rewrap(old: MasterKey, new: MasterKey) -> int:
    """Seal every webhook secret under ``new`` (the master key's rotation)."""
    from .models import Budget

    done = 0
    rows = Budget.objects.select_related("tenant").exclude(webhook_secret=None)
    for row in rows.select_for_update(of=("self",)).order_by("pk"):
        arn, sealed = _arn(row.tenant.account_id, row.name), bytes(row.webhook_secret)
        if new.opens_current(sealed, key_arn=arn, version=SEAL_VERSION):
            continue
        try:
            material = old.unwrap_material(sealed, key_arn=arn, version=SEAL_VERSION)
        except TamperedError:
            continue
        sealed = new.wrap_material(material, key_arn=arn, version=SEAL_VERSION)
        Budget.objects.filter(pk=row.pk).update(webhook_secret=sealed)  # no cache to empty
        done += 1
    return done


def _encoded(material: bytes) -> str:
    return PREFIX + base64.urlsafe_b64encode(material).decode("ascii").rstrip("=")
