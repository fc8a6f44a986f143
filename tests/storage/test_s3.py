"""The S3 store against moto's S3 server: multipart transfers, sha256 kept as object metadata,
and failures that say whose fault they are."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig

from controlplane.storage import S3Settings, StorageError, s3_clients_close, storage_for
from controlplane.storage.s3 import S3Storage

MiB = 1 << 20


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    yield
    s3_clients_close()


def test_large_objects_go_in_parts_and_come_back_verified(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(11 * MiB)
    (src / "big.bin").write_bytes(data)
    store = S3Storage(
        s3,
        bucket,
        "runs",
        transfer=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB),
    )
    manifest = store.put(src, "s1")
    sha = hashlib.sha256(data).hexdigest()
    assert manifest == {"big.bin": {"size": len(data), "sha256": sha}}
    head = s3.head_object(Bucket=bucket, Key="runs/s1/big.bin")
    assert head["ETag"].strip('"').endswith("-3")  # three parts
    assert head["Metadata"] == {"sha256": sha}
    store.fetch("s1", tmp_path / "out", manifest)
    assert (tmp_path / "out" / "big.bin").read_bytes() == data


def test_a_bucket_that_does_not_exist_is_the_callers_error(s3: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    store = S3Storage(s3, "no-such-bucket-here", "p")
    with pytest.raises(StorageError) as caught:
        store.put(src)
    assert caught.value.category == "user"
    assert "s3://no-such-bucket-here/p/f" in str(caught.value)
    assert "NoSuchBucket" in str(caught.value)
    with pytest.raises(StorageError, match="NoSuchBucket"):
        store.list()


def test_an_unreachable_endpoint_is_a_server_error(aws_env, tmp_path: Path) -> None:
    store = storage_for(
        "s3://some-bucket/p", s3=S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1")
    )
    assert isinstance(store, S3Storage)
    with pytest.raises(StorageError) as caught:
        store.list()
    assert caught.value.category == "server" and "s3://some-bucket/p" in str(caught.value)


def test_storage_for_an_s3_uri(aws_env, s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    settings = S3Settings(endpoint_url=s3_endpoint, region="us-east-1")
    store = storage_for(f"s3://{bucket}/runs/exp-1/", s3=settings)
    assert isinstance(store, S3Storage)
    assert (store.bucket, store.prefix) == (bucket, "runs/exp-1")
    assert store.uri("t/s1") == f"s3://{bucket}/runs/exp-1/t/s1"
    assert storage_for(f"s3://{bucket}", s3=settings).uri() == f"s3://{bucket}"
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    manifest = store.put(src, "t/s1")
    rooted = storage_for(store.uri("t/s1"), s3=settings)
    rooted.fetch("", tmp_path / "out", manifest)
    assert (tmp_path / "out" / "f").read_bytes() == b"x"


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPWRIGHT_S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("LOOPWRIGHT_S3_REGION", raising=False)
    assert S3Settings.from_env() == S3Settings(endpoint_url=None, region="us-east-1")
    monkeypatch.setenv("LOOPWRIGHT_S3_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("LOOPWRIGHT_S3_REGION", "eu-west-1")
    assert S3Settings.from_env() == S3Settings("http://minio:9000", "eu-west-1")
