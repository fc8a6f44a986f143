"""Moving everything the KMS master key wraps to a new master key: each local key version's
material and whatever else the service sealed with it (each such sealer registers a
re-wrapper here). Data keys are wrapped by the key versions, so they stay as they are."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import transaction

from .keyring import MasterKey, TamperedError
from .models import KmsKeyVersion

log = logging.getLogger("loopwright.kms")

# (old, new) -> how many rows it re-wrapped; run in the rotation's transaction.
Rewrapper = Callable[[MasterKey, MasterKey], int]
_REWRAPPERS: dict[str, Rewrapper] = {}


def register_rewrapper(name: str, rewrap: Rewrapper) -> None:
    """Everything sealed with ``providers.master_key().seal`` must register how to re-seal it
    (open with ``old``, seal with ``new``, skipping what ``new`` already opens)."""
    _REWRAPPERS[name] = rewrap


def master_key_rewrap(*, old: MasterKey, new: MasterKey, strict: bool = True) -> dict[str, int]:
    """Re-wrap under ``new`` what ``old`` wraps, in one transaction; what ``new`` already opens
    is left as it is, so running it again does nothing. ``strict``: material that neither opens
    is an error (nothing is changed); otherwise it is left for the caller to report."""
    with transaction.atomic():
        counts = {"kms key versions": _key_versions(old, new, strict=strict)}
        for name, rewrap in _REWRAPPERS.items():
            counts[name] = rewrap(old, new)
    if any(counts.values()):  # a fresh or current install has nothing to say at every start
        log.info("KMS master key: re-wrapped %s", counts)
    return counts


def _key_versions(old: MasterKey, new: MasterKey, *, strict: bool) -> int:
    done = 0
    rows = KmsKeyVersion.objects.select_related("key").select_for_update().order_by("pk")
    for row in rows:
        arn, version, wrapped = row.key.arn, row.version, bytes(row.material)
        if new.opens_current(wrapped, key_arn=arn, version=version):
            continue
        try:
            material = old.unwrap_material(wrapped, key_arn=arn, version=version)
        except TamperedError:
            if strict:
                raise TamperedError(
                    f"key {arn} version {version} opens under neither the old nor the new KMS "
                    "master key: nothing was changed"
                ) from None
            continue
        row.material = new.wrap_material(material, key_arn=arn, version=version)
        row.save(update_fields=["material"])
        done += 1
    return done


def unopenable(master: MasterKey) -> list[str]:
    """The key versions ``master`` cannot open (``<arn> v<version>``)."""
    rows = KmsKeyVersion.objects.select_related("key").order_by("pk")
    return [
        f"{row.key.arn} v{row.version}"
        for row in rows
        if not master.opens_current(bytes(row.material), key_arn=row.key.arn, version=row.version)
    ]
