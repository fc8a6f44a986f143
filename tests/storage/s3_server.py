"""moto's S3 served over real HTTP on localhost, and a fresh bucket per test.

Import the fixtures into a conftest (or a test module) to use them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        server._server.server_close()  # type: ignore[union-attr]  # stop() leaves the socket open


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Iterator[Any]:
    """A boto3 client that talks to the server directly (to look at, or spoil, what is stored)."""
    client = boto3.client("s3", region_name="us-east-1", endpoint_url=s3_endpoint, **CREDENTIALS)
    yield client
    client.close()


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"lw-test-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name
