"""Storage from a URI: ``file:///folder`` (local) or ``s3://bucket/prefix`` (boto3, AWS chain).

S3 endpoint and region come from ``S3Settings``; credentials from boto3's standard chain.
"""

from __future__ import annotations

import ipaddress
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from .base import Storage
from .local import LocalStorage

MAX_S3_URI = 1024
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BUCKET_BAD_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_BAD_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

_lock = threading.Lock()
_clients: dict[tuple[str | None, str], Any] = {}


class S3UriError(ValueError):
    """An ``s3://`` URI that names no valid bucket or prefix; the message says why."""


@dataclass(frozen=True)
class S3Settings:
    """Where the S3 API is: ``endpoint_url`` None means AWS itself."""

    endpoint_url: str | None = None
    region: str = "us-east-1"

    @classmethod
    def from_env(cls) -> S3Settings:
        env = os.environ
        return cls(
            endpoint_url=env.get("LOOPWRIGHT_S3_ENDPOINT_URL") or None,
            region=env.get("LOOPWRIGHT_S3_REGION") or "us-east-1",
        )


def s3_client(settings: S3Settings) -> Any:
    """A boto3 S3 client for ``settings`` (shared: boto3 clients are thread-safe)."""
    import boto3

    where = (settings.endpoint_url, settings.region)
    with _lock:
        if where not in _clients:
            _clients[where] = boto3.client("s3", endpoint_url=where[0], region_name=where[1])
        return _clients[where]


def s3_clients_close() -> None:
    """Close and forget the cached clients (their endpoint or credentials changed)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/optional/prefix`` → (bucket, prefix without slashes at either end)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise S3UriError("must look like s3://bucket/optional/prefix")
    if len(uri) > MAX_S3_URI:
        raise S3UriError(f"is {len(uri)} characters; at most {MAX_S3_URI} are allowed")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    check_bucket(bucket)
    prefix = prefix.removesuffix("/")
    if prefix:
        check_prefix(prefix)
    return bucket, prefix


def check_bucket(bucket: str) -> None:
    """Raise ``S3UriError`` unless ``bucket`` follows S3's bucket naming rules."""
    if not bucket:
        raise S3UriError("names no bucket: it must look like s3://bucket/optional/prefix")
    if not _BUCKET_RE.match(bucket):
        raise S3UriError(
            f"bucket {bucket!r}: 3–63 lowercase letters, digits, '.' or '-', "
            "starting and ending with a letter or digit"
        )
    if ".." in bucket or ".-" in bucket or "-." in bucket:
        raise S3UriError(f"bucket {bucket!r}: no '..', '.-' or '-.'")
    if _is_ip(bucket):
        raise S3UriError(f"bucket {bucket!r}: must not look like an IP address")
    if bucket.startswith(_BUCKET_BAD_PREFIXES) or bucket.endswith(_BUCKET_BAD_SUFFIXES):
        raise S3UriError(f"bucket {bucket!r}: uses a prefix or suffix S3 reserves")


def check_prefix(prefix: str) -> None:
    """Raise ``S3UriError`` for a key prefix with empty, '.' or '..' parts or control characters."""
    if _CONTROL_RE.search(prefix) or "\\" in prefix:
        raise S3UriError("the prefix must not hold control characters or '\\'")
    if any(part in ("", ".", "..") for part in prefix.split("/")):
        raise S3UriError(f"prefix {prefix!r}: no empty, '.' or '..' parts")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def local_path(uri: str) -> Path:
    """The folder of a ``file://`` URI."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        raise ValueError(f"not a local file URI: {uri!r}")
    return Path(url2pathname(unquote(parts.path)))


def location(uri: str) -> str:
    """How a stored folder is shown: the path of a local URI, else the URI itself."""
    return str(local_path(uri)) if uri.startswith("file:") else uri


def as_uri(where: str) -> str:
    """The storage URI of a location: URIs as they are, a local folder as ``file:///…``."""
    if where.startswith(("s3://", "file:")):
        return where
    return Path(where).absolute().as_uri()


def join_uri(base: str, key: str) -> str:
    """``key`` under the storage URI ``base``."""
    return f"{base.rstrip('/')}/{key.strip('/')}" if key.strip("/") else base


def storage_for(uri: str, *, s3: S3Settings | None = None) -> Storage:
    """The storage rooted at ``uri`` (prefix "" is ``uri`` itself)."""
    if uri.startswith("s3://"):
        from .s3 import S3Storage

        bucket, prefix = parse_s3_uri(uri)
        return S3Storage(s3_client(s3 or S3Settings.from_env()), bucket, prefix)
    if uri.startswith("file:"):
        return LocalStorage(local_path(uri))
    raise ValueError(f"no storage for {uri!r}: it must start with s3:// or file://")
