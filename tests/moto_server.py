"""moto's AWS stand-ins (S3, KMS) served over real HTTP on localhost, so boto3 in this process
and in a worker's talk to them as to AWS. ``tests/storage/s3_server.py`` and
``tests/kms/aws_server.py`` make fixtures of it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@contextmanager
def moto_served() -> Iterator[str]:
    """A moto server on a free port, as its endpoint URL; stopped (and its socket closed) after."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        server._server.server_close()  # type: ignore[union-attr]  # stop() leaves the socket open


def aws_client(service: str, endpoint: str) -> Any:
    """A boto3 client for ``service`` at ``endpoint``, with moto's test credentials."""
    return boto3.client(service, region_name="us-east-1", endpoint_url=endpoint, **CREDENTIALS)
