"""Checkpoint storage in an S3 bucket through boto3 (multipart transfers for large objects)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from .base import (
    Manifest,
    MissingObjectError,
    ObjectInfo,
    StorageError,
    check_name,
    file_info,
    folder_files,
    join_key,
    verify,
)

DEFAULT_TRANSFER = TransferConfig(
    multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=8
)
MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
# The bucket named by the session is the cause: the caller can fix these.
USER_CODES = {"NoSuchBucket", "AccessDenied", "403", "AllAccessDisabled", "InvalidBucketName"}
DELETE_BATCH = 1000
T = TypeVar("T")


class S3Storage:
    """Objects under ``prefix`` in ``bucket``; a prefix is a folder (keys joined by '/')."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        transfer: TransferConfig | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = join_key(prefix)
        self.transfer = transfer or DEFAULT_TRANSFER

    def _key(self, prefix: str, name: str = "") -> str:
        key = join_key(self.prefix, prefix, name)
        return check_name(key) if key else key

    def uri(self, prefix: str = "") -> str:
        key = self._key(prefix)
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def put(self, folder: Path, prefix: str = "") -> Manifest:
        """Upload every file (its sha256 also kept as object metadata), then drop stale ones."""
        manifest: Manifest = {}
        for name, path in folder_files(folder):
            info = file_info(path)
            key = self._key(prefix, name)
            _call(
                f"s3://{self.bucket}/{key}",
                self.client.upload_file,
                str(path),
                self.bucket,
                key,
                ExtraArgs={"Metadata": {"sha256": info["sha256"]}},
                Config=self.transfer,
            )
            manifest[name] = info
        stale = [name for name in self.list(prefix) if name not in manifest]
        self._delete_keys(self._key(prefix, name) for name in stale)
        return manifest

    def fetch(self, prefix: str, folder: Path, manifest: Mapping[str, ObjectInfo]) -> None:
        for name, expected in manifest.items():
            key = self._key(prefix, check_name(name))
            uri = f"s3://{self.bucket}/{key}"
            out = folder / name
            out.parent.mkdir(parents=True, exist_ok=True)
            part = out.with_name(f".{out.name}.part")
            try:
                _call(
                    uri,
                    self.client.download_file,
                    self.bucket,
                    key,
                    str(part),
                    Config=self.transfer,
                )
                verify(part, expected, uri)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            part.replace(out)

    def list(self, prefix: str = "") -> dict[str, int]:
        base = self._key(prefix)
        start = f"{base}/" if base else ""
        paginator = self.client.get_paginator("list_objects_v2")
        pages = _call(self.uri(prefix), _all, paginator.paginate(Bucket=self.bucket, Prefix=start))
        return {
            obj["Key"][len(start) :]: int(obj["Size"])
            for page in pages
            for obj in page.get("Contents", ())
        }

    def delete(self, prefix: str = "") -> int:
        names = list(self.list(prefix))
        self._delete_keys(self._key(prefix, name) for name in names)
        return len(names)

    def _delete_keys(self, keys: Iterable[str]) -> None:
        batch: builtins.list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: Sequence[str]) -> None:
        where = f"s3://{self.bucket}/{keys[0]}"
        answer = _call(
            where,
            self.client.delete_objects,
            Bucket=self.bucket,
            Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
        )
        errors = answer.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageError(
                f"deleting s3://{self.bucket}/{first.get('Key')}: "
                f"{first.get('Code')} {first.get('Message', '')}".rstrip()
            )


def _all(pages: Iterable[T]) -> list[T]:
    """Every page of a paginated answer (the requests run here)."""
    return list(pages)


def _call(uri: str, action: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one S3 request, its failures as ``StorageError`` naming ``uri``."""
    try:
        return action(*args, **kwargs)
    except ClientError as exc:
        raise _from_client_error(uri, exc) from exc
    except BotoCoreError as exc:
        raise StorageError(f"{uri}: {exc}") from exc
    except Exception as exc:  # boto3 wraps upload failures, keeping the ClientError as context
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ClientError):
            raise _from_client_error(uri, cause) from exc
        raise


def _from_client_error(uri: str, exc: ClientError) -> StorageError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    if code in MISSING_CODES:
        return MissingObjectError(uri)
    message = error.get("Message") or str(exc)
    category = "user" if code in USER_CODES else "server"
    return StorageError(f"{uri}: {code} {message}".strip(), category=category)
