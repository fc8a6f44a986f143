"""What every checkpoint store offers: put, fetch (verified), list, delete, and a URI per prefix.

Every object's size and sha256 go into a manifest at upload; a fetch checks each object against it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol, TypedDict

CHUNK = 1 << 20


class ObjectInfo(TypedDict):
    """One stored object, as the manifest records it."""

    size: int
    sha256: str


Manifest = dict[str, ObjectInfo]


class StorageError(Exception):
    """A store could not do what was asked.

    ``category`` follows the wire protocol: ``user`` when the caller's data or bucket is the
    cause (altered or missing objects, a bucket that does not exist or refuses us), ``server``
    when the store itself failed (unreachable, throttled, misconfigured).
    """

    category = "server"

    def __init__(self, message: str, *, category: str | None = None) -> None:
        super().__init__(message)
        if category is not None:
            self.category = category


class IntegrityError(StorageError):
    """A stored object is not what the manifest recorded at upload."""

    category = "user"

    def __init__(self, uri: str, message: str) -> None:
        super().__init__(f"{uri}: {message}")
        self.uri = uri


class MissingObjectError(IntegrityError):
    """An object the manifest lists is not in the store."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, "missing from storage")


class Storage(Protocol):
    """A place that holds folders of files under key prefixes ("" is the store's own root)."""

    def uri(self, prefix: str = "") -> str:
        """Where ``prefix`` lives: ``file:///...`` or ``s3://bucket/key``."""
        ...

    def put(self, folder: Path, prefix: str = "") -> Manifest:
        """Store every file of ``folder`` under ``prefix``, replacing what was there."""
        ...

    def fetch(self, prefix: str, folder: Path, manifest: Mapping[str, ObjectInfo]) -> None:
        """Copy the objects ``manifest`` names into ``folder``, each checked against it."""
        ...

    def list(self, prefix: str = "") -> dict[str, int]:
        """The objects under ``prefix``: name (relative to it) → size in bytes."""
        ...

    def delete(self, prefix: str = "") -> int:
        """Remove everything under ``prefix``; returns how many objects went."""
        ...


def join_key(*parts: str) -> str:
    """Key parts joined by '/', without empty parts or stray slashes."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def check_name(name: str) -> str:
    """An object name as a relative POSIX path; refuses anything that could leave its folder."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        raise StorageError(f"bad object name {name!r}", category="user")
    if any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"bad object name {name!r}", category="user")
    return name


def folder_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """Every file of ``folder`` (recursively) with its name relative to it, in name order."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        yield path.relative_to(folder).as_posix(), path


def file_info(path: Path) -> ObjectInfo:
    """The size and sha256 of a file."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def verify(path: Path, expected: ObjectInfo, uri: str) -> None:
    """Raise ``IntegrityError`` naming ``uri`` unless ``path`` matches ``expected``."""
    got = file_info(path)
    if got["size"] != expected["size"]:
        raise IntegrityError(
            uri, f"{got['size']} bytes, but {expected['size']} were stored (the object changed)"
        )
    if got["sha256"] != expected["sha256"]:
        raise IntegrityError(
            uri,
            f"sha256 {got['sha256']} does not match the {expected['sha256']} recorded at upload",
        )


def manifest_digest(manifest: Mapping[str, ObjectInfo]) -> str:
    """One sha256 for a whole manifest (its canonical JSON)."""
    body = json.dumps(
        {name: {"size": i["size"], "sha256": i["sha256"]} for name, i in manifest.items()},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode()).hexdigest()
