"""Checkpoint storage in a local folder (the embedded default): temporary names, then renames."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .base import (
    CHUNK,
    Manifest,
    MissingObjectError,
    ObjectInfo,
    StorageError,
    check_name,
    folder_files,
    join_key,
    verify,
)


class LocalStorage:
    """Objects are files under ``root``; a prefix is a folder."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).absolute()

    def _dir(self, prefix: str) -> Path:
        key = join_key(prefix)
        return self.root / check_name(key) if key else self.root

    def uri(self, prefix: str = "") -> str:
        return self._dir(prefix).as_uri()

    def put(self, folder: Path, prefix: str = "") -> Manifest:
        """Copy ``folder`` beside the destination under a temporary name, then swap it in."""
        dest = self._dir(prefix)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.put-", dir=dest.parent))
        manifest: Manifest = {}
        try:
            for name, src in folder_files(folder):
                manifest[name] = _copy(src, tmp / name)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _swap(tmp, dest)
        return manifest

    def fetch(self, prefix: str, folder: Path, manifest: Mapping[str, ObjectInfo]) -> None:
        base = self._dir(prefix)
        for name, expected in manifest.items():
            src = base / check_name(name)
            uri = src.as_uri()
            if not src.is_file():
                raise MissingObjectError(uri)
            out = folder / name
            out.parent.mkdir(parents=True, exist_ok=True)
            part = out.with_name(f".{out.name}.part")
            try:
                _copy(src, part)
                verify(part, expected, uri)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            part.replace(out)

    def list(self, prefix: str = "") -> dict[str, int]:
        base = self._dir(prefix)
        if not base.is_dir():
            return {}
        return {name: path.stat().st_size for name, path in folder_files(base)}

    def delete(self, prefix: str = "") -> int:
        base = self._dir(prefix)
        count = len(self.list(prefix))
        if base.is_dir():
            try:
                shutil.rmtree(base)
            except OSError as exc:
                raise StorageError(f"deleting {base.as_uri()}: {exc}") from exc
        return count


def _copy(src: Path, dest: Path) -> ObjectInfo:
    """Copy a file (flushed to disk) and return what was written: its size and sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with src.open("rb") as fin, dest.open("wb") as fout:
        while chunk := fin.read(CHUNK):
            digest.update(chunk)
            fout.write(chunk)
            size += len(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    return {"size": size, "sha256": digest.hexdigest()}


def _swap(new: Path, dest: Path) -> None:
    """Put the folder ``new`` where ``dest`` is (by renames), then drop the old one."""
    old = dest.with_name(f".{dest.name}.old-{new.name.rsplit('-', 1)[-1]}")
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
