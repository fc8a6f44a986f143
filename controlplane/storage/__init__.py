"""Checkpoint storage behind one interface: a local folder (the embedded default) or S3 (boto3).

No Django here: the control plane and the workers both use it.
"""

from .base import (
    IntegrityError,
    Manifest,
    MissingObjectError,
    ObjectInfo,
    Storage,
    StorageError,
    manifest_digest,
)
from .local import LocalStorage
from .uris import (
    S3Settings,
    S3UriError,
    as_uri,
    join_uri,
    location,
    parse_s3_uri,
    s3_clients_close,
    storage_for,
)

__all__ = [
    "IntegrityError",
    "LocalStorage",
    "Manifest",
    "MissingObjectError",
    "ObjectInfo",
    "S3Settings",
    "S3UriError",
    "Storage",
    "StorageError",
    "as_uri",
    "join_uri",
    "location",
    "manifest_digest",
    "parse_s3_uri",
    "s3_clients_close",
    "storage_for",
]
