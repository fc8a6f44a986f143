"""Model package downloads: the archive is streamed into a temporary file, then extracted member by
member, refusing anything that is not a plain file or folder inside the destination."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ._http import HTTPClient
from .errors import LoopwrightError

__all__ = ["FORMATS", "download_model_package", "extract_archive"]

FORMATS = ("adapter", "merged")
DOWNLOAD_PATH = "registry/model-packages/download"
DOWNLOAD_TIMEOUT = 600.0
"""Read timeout of a download: the server opens and archives the whole version first."""


def download_params(ref: str, format: str, include_optimizer: bool) -> dict[str, str]:
    """The query of a download; a ``ValueError`` for a reference or format the server refuses."""
    if not isinstance(ref, str) or not ref.startswith(("tinker://", "arn:")):
        raise ValueError(f"ref must be a tinker:// path or a model package ARN, not {ref!r}")
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    params = {"path": ref, "format": format}
    if include_optimizer:
        params["include_optimizer"] = "true"
    return params


def download_model_package(
    http: HTTPClient,
    ref: str,
    dest_dir: str | os.PathLike[str],
    *,
    format: str = "adapter",
    include_optimizer: bool = False,
) -> Path:
    """Download a version into ``dest_dir`` and return the folder it extracted to."""
    params = download_params(ref, format, include_optimizer)
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".loopwright-download-", suffix=".tar.gz", dir=dest)
    try:
        with os.fdopen(fd, "w+b") as sink:
            http.download(DOWNLOAD_PATH, sink, params=params, timeout=DOWNLOAD_TIMEOUT)
            sink.seek(0)
            return extract_archive(sink, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def extract_archive(archive: BinaryIO, dest: Path) -> Path:
    """Extract a ``.tar.gz`` into ``dest``; returns its one top-level folder (else ``dest``).

    Every member is checked before anything is written: absolute names, ``..``, links and
    special files are refused with ``LoopwrightError``.
    """
    try:
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            members = [(member, _target(dest, member)) for member in tar.getmembers()]
            for member, target in members:
                _extract(tar, member, target)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise LoopwrightError(f"the downloaded archive is unreadable: {exc}") from exc
    return _root(dest, [member for member, _ in members])


def _target(dest: Path, member: tarfile.TarInfo) -> Path:
    """Where ``member`` goes under ``dest``; refuses one that could go anywhere else."""
    name = member.name
    parts = PurePosixPath(name).parts
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or ".." in parts
        or (parts and ":" in parts[0])
    ):
        raise LoopwrightError(f"refusing archive member {name!r}: it would leave {dest}")
    if not (member.isfile() or member.isdir()):
        raise LoopwrightError(
            f"refusing archive member {name!r}: only plain files and folders are extracted"
        )
    base = dest.resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and base not in target.parents:
        raise LoopwrightError(f"refusing archive member {name!r}: it would leave {dest}")
    return target


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    source = tar.extractfile(member)
    if source is None:  # a file member always has a body
        raise LoopwrightError(f"archive member {member.name!r} has no content")
    target.parent.mkdir(parents=True, exist_ok=True)
    with source, target.open("wb") as out:
        shutil.copyfileobj(source, out)


def _root(dest: Path, members: list[tarfile.TarInfo]) -> Path:
    """The archive's one top-level folder under ``dest``, or ``dest`` when it has several."""
    tops = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
    if len(tops) == 1:
        folder = dest / tops.pop()
        if folder.is_dir():
            return folder
    return dest
