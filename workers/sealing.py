"""Checkpoint folders at rest: every file sealed (LWENC1) under the tenant's KMS key.

The engine writes and reads plain folders in a private scratch directory that is removed
afterwards; only sealed files reach storage. No Django here: keys come in as callables.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from controlplane.kms.envelope import is_sealed, open_file, seal_file
from controlplane.kms.keyring import (
    KeyProvider,
    KeyRef,
    KmsError,
    TamperedError,
    ensure_usable,
)
from controlplane.storage import Storage, storage_for

from .engine.errors import CheckpointError, EngineError


class SealingError(EngineError):
    """A checkpoint could not be sealed or opened with its KMS key.

    ``user`` when the key or the stored files are the cause (disabled or deleted key, altered
    files); ``server`` when the key service itself failed (unreachable, throttled).
    """

    def __init__(self, message: str, *, category: str) -> None:
        super().__init__(message)
        self.category = category


def _category(exc: KmsError) -> str:
    return "server" if type(exc) is KmsError else "user"


def context_of(sealing: Mapping, name: str) -> dict[str, str]:
    """The encryption context of one file: the checkpoint's context plus the file's name."""
    return {**sealing["context"], "file": name}


@dataclass(frozen=True)
class Vault:
    """Seals and opens checkpoint folders for one tenant.

    ``lookup`` returns the tenant's key by ARN (raising ``KeyNotFoundError`` for any other);
    ``provider`` gives the provider for a key; scratch folders go under ``scratch_root``
    (the system temporary directory when None); ``stores`` gives the storage at a URI.
    """

    lookup: Callable[[str], KeyRef]
    provider: Callable[[KeyRef], KeyProvider]
    scratch_root: Path | None = None
    stores: Callable[[str], Storage] = storage_for

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Path]:
        """A fresh folder only this process can read, removed on exit."""
        if self.scratch_root is not None:
            self.scratch_root.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="lw-ckpt-", dir=self.scratch_root))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def usable_key(self, sealing: Mapping, doing: str) -> KeyRef:
        """The sealing's key, if it is Enabled; raise ``SealingError`` otherwise."""
        try:
            key = self.lookup(sealing["key_arn"])
            ensure_usable(key)
        except KmsError as exc:
            raise SealingError(f"{doing}: {exc}", category=_category(exc)) from exc
        return key

    def seal_folder(self, plain: Path, dest: Path, sealing: Mapping, *, prefix: str = "") -> int:
        """Seal every file of ``plain`` into ``dest``, which is replaced whole only on success.

        Returns the plaintext size in bytes.
        """
        doing = f"sealing {sealing['context'].get('resource', dest.name)}"
        key = self.usable_key(sealing, doing)
        provider = self.provider(key)
        tmp = dest.with_name(dest.name + ".sealing")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        total = 0
        try:
            for src in _files(plain):
                name = src.relative_to(plain).as_posix()
                out = tmp / name
                out.parent.mkdir(parents=True, exist_ok=True)
                info = seal_file(
                    src, out, key=key, provider=provider, context=context_of(sealing, prefix + name)
                )
                total += info.plaintext_size
        except KmsError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SealingError(f"{doing}: {exc}", category=_category(exc)) from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _replace(tmp, dest)
        return total

    def open_folder(
        self, sealed: Path, plain: Path, sealing: Mapping, *, skip: Collection[str] = ()
    ) -> None:
        """Verify and decrypt every file of ``sealed`` (except ``skip``) into ``plain``."""
        resource = sealing["context"].get("resource", sealed.name)
        doing = f"opening {resource}"
        if not sealed.is_dir():
            raise CheckpointError(f"no checkpoint at {resource}")
        key = self.usable_key(sealing, doing)

        def lookup(arn: str) -> KeyRef:
            if arn != key.arn:
                raise TamperedError(
                    f"a file names key {arn}, but {resource} was sealed with {key.arn}"
                )
            return key

        try:
            for src in _files(sealed):
                name = src.relative_to(sealed).as_posix()
                if name in skip:
                    continue
                if not is_sealed(src):
                    raise TamperedError(f"{name} of {resource} is not sealed")
                out = plain / name
                out.parent.mkdir(parents=True, exist_ok=True)
                open_file(
                    src,
                    out,
                    key_lookup=lookup,
                    provider_for_key=self.provider,
                    expected_context=context_of(sealing, name),
                )
        except KmsError as exc:
            raise SealingError(f"{doing}: {exc}", category=_category(exc)) from exc

    @contextlib.contextmanager
    def opened(
        self, sealed: Path, sealing: Mapping, *, skip: Collection[str] = ()
    ) -> Iterator[Path]:
        """The plaintext of a sealed checkpoint folder, in scratch for the block's duration."""
        with self.scratch() as scratch:
            plain = scratch / "checkpoint"
            plain.mkdir()
            self.open_folder(sealed, plain, sealing, skip=skip)
            yield plain


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _replace(new: Path, dest: Path) -> None:
    """Put ``new`` where ``dest`` is, then drop the old folder."""
    old = dest.with_name(dest.name + ".replaced")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
