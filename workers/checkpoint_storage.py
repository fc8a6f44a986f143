"""Sealed checkpoints in storage: sealed in scratch and uploaded with a manifest; fetched into
scratch, every object checked against its manifest, then opened. No Django here."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from controlplane.storage import Manifest, ObjectInfo, StorageError

from .engine.errors import EngineError
from .sealing import Vault


class StoredCheckpointError(EngineError):
    """A checkpoint could not be written to or read from storage.

    ``user`` when the stored objects or the session's bucket are the cause (altered or missing
    objects, a bucket that does not exist or refuses access); ``server`` otherwise.
    """

    def __init__(self, message: str, *, category: str) -> None:
        super().__init__(message)
        self.category = category


@contextlib.contextmanager
def storage_errors(doing: str) -> Iterator[None]:
    """Storage failures inside the block become ``StoredCheckpointError`` saying what failed."""
    try:
        yield
    except StorageError as exc:
        raise StoredCheckpointError(f"{doing}: {exc}", category=exc.category) from exc


def upload(vault: Vault, sealed: Path, uri: str, resource: str) -> Manifest:
    """Put the sealed files at ``uri``; returns their manifest."""
    with storage_errors(f"saving {resource} to {uri}"):
        return vault.stores(uri).put(sealed)


@contextlib.contextmanager
def fetched(
    vault: Vault,
    uri: str,
    manifest: Mapping[str, ObjectInfo],
    sealing: Mapping,
    *,
    skip: Collection[str] = (),
) -> Iterator[Path]:
    """The plaintext of the checkpoint at ``uri``, in scratch for the block's duration.

    Every object is fetched and checked against ``manifest`` before any is opened, so a damaged
    checkpoint fails here, before the engine reads anything.
    """
    resource = sealing["context"].get("resource", uri)
    wanted = {name: info for name, info in manifest.items() if name not in skip}
    with vault.scratch() as scratch:
        sealed, plain = scratch / "sealed", scratch / "plain"
        sealed.mkdir()
        plain.mkdir()
        with storage_errors(f"loading {resource}"):
            vault.stores(uri).fetch("", sealed, wanted)
        vault.open_folder(sealed, plain, sealing, skip=skip)
        yield plain
