"""boto3's own runtime client (``sagemakertrainingsessionruntime``) for in-process tests: botocore
serializes, signs and parses as it does against AWS, and only its transport is Django's test
client (the seam httpx's MockTransport is for httpx). End-to-end tests use real HTTP."""

from __future__ import annotations

import io
from urllib.parse import urlsplit

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from django.test import Client

SERVICE = "sagemakertrainingsessionruntime"
ENDPOINT = "http://testserver/sagemaker-runtime"


class _Raw(io.BytesIO):
    """The body as urllib3 hands it to botocore (``stream`` for whole bodies, ``read`` for
    streamed ones)."""

    def stream(self, amt: int = 2**16, decode_content: bool = True):
        while chunk := self.read(amt):
            yield chunk


class DjangoTransport:
    """botocore's HTTP session, answered by the Django app in this process."""

    def __init__(self) -> None:
        self.client = Client(raise_request_exception=False)
        self.sent: list = []

    def send(self, request) -> AWSResponse:
        self.sent.append(request)
        parts = urlsplit(request.url)
        body = request.body or b""
        if hasattr(body, "read"):
            body = body.read()
        if isinstance(body, str):
            body = body.encode()
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        content_type = headers.pop("Content-Type", None) or "application/octet-stream"
        meta = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
        meta["QUERY_STRING"] = parts.query
        meta.setdefault("HTTP_HOST", parts.netloc)  # urllib3 adds it on the wire
        response = self.client.generic(
            request.method, parts.path, data=body, content_type=content_type, **meta
        )
        content = b"".join(response.streaming_content) if response.streaming else response.content
        return AWSResponse(request.url, response.status_code, dict(response.items()), _Raw(content))


def runtime_client(key_id: str, secret: str, *, region: str = "us-east-1", validate: bool = True):
    """boto3's runtime client signing with the access key ``key_id``/``secret`` (``validate``:
    whether botocore checks the input against the model before sending it)."""
    client = boto3.client(
        SERVICE,
        region_name=region,
        endpoint_url=ENDPOINT,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(
            retries={"mode": "standard", "max_attempts": 1}, parameter_validation=validate
        ),
    )
    client._endpoint.http_session = DjangoTransport()
    return client
