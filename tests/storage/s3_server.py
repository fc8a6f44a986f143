"""moto's S3 served over real HTTP on localhost, and a fresh bucket per test.

Import the fixtures into a conftest (or a test module) to use them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.moto_server import aws_client, moto_served

__all__ = ["bucket", "s3", "s3_endpoint"]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_served() as url:
        yield url


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Iterator[Any]:
    """A boto3 client that talks to the server directly (to look at, or spoil, what is stored)."""
    client = aws_client("s3", s3_endpoint)
    yield client
    client.close()


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"lw-test-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name
