"""Downloads of model package versions: the sealed objects are fetched, checked against the
checkpoint's manifest and opened in a private scratch folder, then served as one ``.tar.gz``
that exists only until its response ends."""

from __future__ import annotations

import contextlib
import logging
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from controlplane.errors import DomainError, NotFound
from controlplane.iam.resources import model_package_arn
from controlplane.kms import providers
from controlplane.kms import services as kms
from controlplane.kms.envelope import is_sealed, open_file
from controlplane.kms.keyring import KeyRef, KmsError, TamperedError, ensure_usable
from controlplane.kms.selectors import key_ref_by_arn
from controlplane.storage import ObjectInfo, StorageError, as_uri
from controlplane.storage.base import folder_files
from controlplane.storage.uris import local_path
from controlplane.training_sessions.models import Checkpoint
from controlplane.training_sessions.services.storage import storage_at

from .models import ModelPackage
from .selectors import merged_manifest

log = logging.getLogger("loopwright.registry")

FORMATS = ("adapter", "merged")
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json", "loopwright.json")
OPTIMIZER_FILE = "optimizer.safetensors"
MERGED_CONTEXT_PREFIX = "merged/"  # merged files are sealed under the name merged/<file>
CHUNK = 1 << 20
COMPRESS_LEVEL = 1  # weights barely compress; a higher level only costs time


class PackageDamaged(DomainError):
    """A stored object is missing, altered or not sealed as recorded: nothing is served."""

    status = 409
    code = "package_damaged"


class DownloadUnavailable(DomainError):
    """Storage or the key service failed for a reason of its own; trying again may work."""

    status = 503
    code = "unavailable"
    retry_after = 30


@dataclass(frozen=True)
class Download:
    """What one download reads: which objects of which stored folder, and how they open.

    ``names`` None means every object of the folder; ``manifest`` None means a local folder
    written before manifests were kept, read as it is; ``key_arn`` "" means unsealed files.
    """

    package: ModelPackage
    format: str
    uri: str
    names: tuple[str, ...] | None
    manifest: Mapping[str, ObjectInfo] | None
    key_arn: str
    context_prefix: str = ""

    @property
    def arn(self) -> str:
        p = self.package
        return model_package_arn(p.tenant, p.group.name, p.version)

    @property
    def root(self) -> str:
        """The archive's one top-level folder."""
        return f"{self.package.group.name}-v{self.package.version}-{self.format}"

    @property
    def filename(self) -> str:
        """The archive's name; one with the optimizer state says so, so that it and the plain
        adapter of the same version are two files side by side (the folder inside is the same)."""
        with_optimizer = "-with-optimizer" if OPTIMIZER_FILE in (self.names or ()) else ""
        return f"{self.root}{with_optimizer}.tar.gz"


# -- what to serve -----------------------------------------------------------------------------
def download_plan(
    *, package: ModelPackage, format: str, include_optimizer: bool, field: str = "version"
) -> Download:
    """Check that ``package`` has what is asked (400 otherwise; 404 once its weights are gone)."""
    if format not in FORMATS:
        raise DomainError(f"format: one of {', '.join(FORMATS)}", field="format")
    arn = model_package_arn(package.tenant, package.group.name, package.version)
    ckpt = package.checkpoint
    if ckpt is None:
        raise NotFound(
            f"model package {arn} has no weights any more (its checkpoint {package.tinker_path} "
            "expired, was deleted or was overwritten by a later save)",
            field=field,
        )
    if format == "merged":
        return _merged_plan(package, ckpt, arn, include_optimizer)
    if include_optimizer and package.kind != ModelPackage.Kind.TRAINING_STATE:
        raise DomainError(
            f"include_optimizer: {arn} holds {package.kind.replace('_', ' ')} without optimizer "
            "state; only versions saved with save_state have it",
            field="include_optimizer",
        )
    return Download(
        package=package,
        format=format,
        uri=ckpt.storage_uri or as_uri(ckpt.storage_path),
        names=ADAPTER_FILES + ((OPTIMIZER_FILE,) if include_optimizer else ()),
        manifest=ckpt.manifest,
        key_arn=ckpt.kms_key_arn,
    )


def _merged_plan(
    package: ModelPackage, ckpt: Checkpoint, arn: str, include_optimizer: bool
) -> Download:
    if include_optimizer:
        raise DomainError(
            "include_optimizer: only adapter downloads of training state carry optimizer state",
            field="include_optimizer",
        )
    if package.kind != ModelPackage.Kind.MERGED or not ckpt.merged_path:
        raise DomainError(
            f"format: {arn} holds {package.kind.replace('_', ' ')} saved without "
            "merge_weights=True, so it has no merged model; download format=adapter, or save "
            "with save_weights_for_sampler(merge_weights=True)",
            field="format",
        )
    manifest = None
    if ckpt.manifest is not None:  # stored with manifests: the merge has one of its own
        manifest = merged_manifest(package)
        if manifest is None:
            raise PackageDamaged(f"{arn}: no manifest was recorded for its merged model")
    return Download(
        package=package,
        format="merged",
        uri=as_uri(ckpt.merged_path),
        names=None,
        manifest=manifest,
        key_arn=ckpt.kms_key_arn,
        context_prefix=MERGED_CONTEXT_PREFIX,
    )


# -- building the archive ----------------------------------------------------------------------
class Archive:
    """A built ``.tar.gz``, streamed in chunks; its scratch folder goes when the stream ends or
    is closed (the server closes it when the response ends, the client's disconnect included)."""

    def __init__(self, scratch: Path, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        self._scratch = scratch

    def __iter__(self) -> Iterator[bytes]:
        try:
            with self.path.open("rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk
        finally:
            self.close()

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


def archive_build(download: Download, *, actor: str, scratch_root: Path | None = None) -> Archive:
    """Fetch, verify and open every object, then archive them; on any failure nothing is left.

    Plaintext lives only in a fresh private folder under ``scratch_root`` (the setting
    ``DOWNLOAD_SCRATCH_DIR``, else the system temporary folder).
    """
    sealing = _sealing(download)
    root = scratch_root or _scratch_setting()
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lw-download-", dir=root))
    try:
        plain = _plaintext(download, sealing, scratch)
        archive = scratch / download.filename
        _write_tar(plain, archive, download.root, int(download.package.created_at.timestamp()))
        shutil.rmtree(plain)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    log.info("registry: %s downloaded as %s by %s", download.arn, download.format, actor)
    return Archive(scratch, archive)


@contextlib.contextmanager
def opened(download: Download, *, scratch_root: Path | None = None) -> Iterator[Path]:
    """The download's files, fetched, checked against the manifest and opened in a private
    scratch folder that is removed when the block ends (for copies)."""
    root = scratch_root or _scratch_setting()
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lw-open-", dir=root))
    try:
        yield _plaintext(download, _sealing(download), scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def storage_failures(doing: str):
    """Storage and KMS failures as API errors saying what failed (see ``_failures``)."""
    return _failures(doing)


def _scratch_setting() -> Path | None:
    where = settings.DOWNLOAD_SCRATCH_DIR
    return Path(where) if where else None


def _sealing(download: Download) -> dict | None:
    """How the files open (None: saved before sealing); a disabled or deleted key is a 400."""
    if not download.key_arn:
        return None
    return kms.load_sealing(
        tenant=download.package.tenant,
        key_arn=download.key_arn,
        resource=download.package.tinker_path,
        field="kms_key_arn",
    )


def _plaintext(download: Download, sealing: dict | None, scratch: Path) -> Path:
    """The files to archive, verified and opened into ``scratch/plain``."""
    source, names = _fetched(download, scratch / "sealed")
    plain = scratch / "plain"
    plain.mkdir()
    key = _key(download, sealing) if sealing is not None else None
    for name in names:
        src, out = source / name, plain / name
        if not src.is_file():
            raise PackageDamaged(f"{download.uri}/{name}: missing from storage")
        out.parent.mkdir(parents=True, exist_ok=True)
        if sealing is None or key is None:
            shutil.copyfile(src, out)
        else:
            _open(src, out, sealing, key, download.context_prefix + name)
    return plain


def _fetched(download: Download, sealed: Path) -> tuple[Path, list[str]]:
    """Where the stored files are now, and which to serve: fetched into ``sealed`` and checked
    against the manifest, or (without one) the local folder as it is."""
    if download.manifest is None:
        if not download.uri.startswith("file:"):
            raise PackageDamaged(f"{download.uri}: no manifest was recorded to check it against")
        folder = local_path(download.uri)
        if not folder.is_dir():
            raise PackageDamaged(f"{download.uri}: missing from storage")
        if download.names is not None:
            return folder, list(download.names)
        return folder, [name for name, _ in folder_files(folder)]
    names = list(download.names) if download.names is not None else sorted(download.manifest)
    for name in names:
        if name not in download.manifest:
            raise PackageDamaged(f"{download.uri}/{name}: not in the checkpoint's manifest")
    sealed.mkdir()
    with _failures(f"reading {download.package.tinker_path}"):
        storage_at(download.uri).fetch(
            "", sealed, {name: download.manifest[name] for name in names}
        )
    return sealed, names


def _key(download: Download, sealing: dict) -> KeyRef:
    with _failures(f"opening {download.package.tinker_path}"):
        key = key_ref_by_arn(tenant_id=download.package.tenant_id, arn=sealing["key_arn"])
        ensure_usable(key)
    return key


def _open(src: Path, out: Path, sealing: dict, key: KeyRef, name: str) -> None:
    """Verify and decrypt one file sealed with ``key`` under the file name ``name``."""
    resource = sealing["context"].get("resource", "")

    def lookup(arn: str) -> KeyRef:
        if arn != key.arn:
            raise TamperedError(f"{name} names key {arn}, but {resource} was sealed with {key.arn}")
        return key

    with _failures(f"opening {name} of {resource}"):
        if not is_sealed(src):
            raise TamperedError("the file is not sealed")
        open_file(
            src,
            out,
            key_lookup=lookup,
            provider_for_key=providers.provider,
            expected_context={**sealing["context"], "file": name},
        )


@contextlib.contextmanager
def _failures(doing: str) -> Iterator[None]:
    """Storage and KMS failures as API errors saying what failed: damaged objects are a 409,
    an unusable key a 400, an unreachable store or key service a 503."""
    try:
        yield
    except StorageError as exc:
        if exc.category == "user":
            raise PackageDamaged(f"{doing}: {exc}") from exc
        raise DownloadUnavailable(f"{doing}: {exc}") from exc
    except TamperedError as exc:
        raise PackageDamaged(f"{doing}: {exc}") from exc
    except KmsError as exc:
        if type(exc) is KmsError:  # the key service itself failed
            raise DownloadUnavailable(f"{doing}: {exc}") from exc
        raise DomainError(f"{doing}: {exc}", field="kms_key_arn") from exc


def _write_tar(plain: Path, archive: Path, root: str, mtime: int) -> None:
    """Every file of ``plain`` under ``root/``, with fixed owner, modes and times."""
    with tarfile.open(archive, "w:gz", compresslevel=COMPRESS_LEVEL) as tar:
        tar.addfile(_member(root, mtime, tarfile.DIRTYPE, 0o755))
        for name, path in folder_files(plain):
            info = _member(f"{root}/{name}", mtime, tarfile.REGTYPE, 0o644)
            info.size = path.stat().st_size
            with path.open("rb") as f:
                tar.addfile(info, f)


def _member(name: str, mtime: int, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    return info
