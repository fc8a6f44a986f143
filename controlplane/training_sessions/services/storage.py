"""Where checkpoints live: under the session's ``s3_output_path``, or the local storage folder.

S3 endpoint and region come from settings (``LOOPWRIGHT_S3_*``); credentials from the AWS chain.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from controlplane.errors import DomainError
from controlplane.storage import S3Settings, S3UriError, Storage, parse_s3_uri, storage_for

FIELD = "s3_output_path"


def s3_settings() -> S3Settings:
    return S3Settings(endpoint_url=settings.S3_ENDPOINT_URL, region=settings.S3_REGION)


def storage_at(uri: str) -> Storage:
    """The storage rooted at ``uri`` (a checkpoint's URI: its own objects are under "")."""
    return storage_for(uri, s3=s3_settings())


def storage_root(platform: dict) -> str:
    """The URI a session's checkpoints go under."""
    return platform.get(FIELD) or Path(settings.STORAGE_DIR).absolute().as_uri()


def s3_output_path_checked(value: object) -> str:
    """``s3://bucket/optional/prefix`` as stored (no trailing '/'); a 400 naming the field."""
    if not isinstance(value, str):
        raise DomainError(f"{FIELD}: must be a string like s3://bucket/prefix", field=FIELD)
    try:
        bucket, prefix = parse_s3_uri(value)
    except S3UriError as exc:
        raise DomainError(f"{FIELD}: {exc}", field=FIELD) from None
    return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
