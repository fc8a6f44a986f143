"""s3:// URIs: S3's bucket naming rules, sane prefixes, at most 1024 characters."""

from __future__ import annotations

import pytest

from controlplane.storage import S3UriError, join_uri, parse_s3_uri, storage_for


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("s3://my-bucket", ("my-bucket", "")),
        ("s3://my-bucket/", ("my-bucket", "")),
        ("s3://my.bucket.01/runs/exp 1/", ("my.bucket.01", "runs/exp 1")),
        ("s3://abc/a/b/c", ("abc", "a/b/c")),
    ],
)
def test_good_uris(uri: str, parsed: tuple[str, str]) -> None:
    assert parse_s3_uri(uri) == parsed


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("http://bucket/x", "s3://bucket"),
        ("bucket/x", "s3://bucket"),
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://ab/x", "3–63"),
        ("s3://" + "a" * 64, "3–63"),
        ("s3://My-Bucket/x", "3–63"),
        ("s3://under_score", "3–63"),
        ("s3://-leading", "3–63"),
        ("s3://trailing-", "3–63"),
        ("s3://two..dots", "no '..'"),
        ("s3://dot.-dash", "no '..'"),
        ("s3://192.168.1.10/x", "IP address"),
        ("s3://xn--bucket", "reserves"),
        ("s3://bucket-s3alias", "reserves"),
        ("s3://bucket//x", "no empty"),
        ("s3://bucket/a/../b", "no empty"),
        ("s3://bucket/./b", "no empty"),
        ("s3://bucket/a\nb", "control characters"),
        ("s3://bucket/" + "p" * 1013, "at most 1024"),
    ],
)
def test_bad_uris(uri: str, why: str) -> None:
    with pytest.raises(S3UriError, match=why.replace(".", r"\.")):
        parse_s3_uri(uri)


def test_the_longest_uri_allowed() -> None:
    uri = "s3://bucket/" + "p" * (1024 - len("s3://bucket/"))
    assert parse_s3_uri(uri)[1] == "p" * 1012


def test_join_and_unknown_schemes() -> None:
    assert join_uri("s3://b/base/", "/t/s1") == "s3://b/base/t/s1"
    assert join_uri("file:///srv/storage", "t/m/weights/s1") == "file:///srv/storage/t/m/weights/s1"
    with pytest.raises(ValueError, match="s3:// or file://"):
        storage_for("gs://bucket/x")
