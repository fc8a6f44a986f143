"""boto3 clients whose requests the Django test client serves in this process: botocore
serializes, signs and parses as it always does (``before-send`` hands the signed request to
Django instead of the network), so the face's answers are checked by botocore's own model in
tests that need no live stack."""

from __future__ import annotations

import io
from urllib.parse import urlsplit

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from django.test import Client

ENDPOINT = "http://testserver/sagemaker"


class _Raw(io.BytesIO):
    """The body as urllib3 hands it to botocore: ``stream`` for a whole body, ``read`` for a
    streamed one."""

    def stream(self, amt: int = 2**16, decode_content: bool = True):
        while chunk := self.read(amt):
            yield chunk


def _via_django(request, **_kw) -> AWSResponse:
    parts = urlsplit(request.url)
    # RAW_URI: the path as sent, which gunicorn passes on (Django's own path is decoded)
    meta = {"QUERY_STRING": parts.query, "RAW_URI": parts.path}
    content_type = "application/octet-stream"
    for name, value in request.headers.items():
        value = value.decode() if isinstance(value, bytes) else value
        if name.lower() == "content-type":
            content_type = value
        elif name.lower() != "content-length":
            meta["HTTP_" + name.upper().replace("-", "_")] = value
    meta.setdefault("HTTP_HOST", parts.netloc)
    body = request.body or b""
    if hasattr(body, "read"):
        body = body.read()
    if isinstance(body, str):
        body = body.encode()
    meta["CONTENT_TYPE"] = content_type  # the test client leaves it out of an empty body's
    answer = Client().generic(
        request.method, parts.path, data=body, content_type=content_type, **meta
    )
    content = b"".join(answer.streaming_content) if answer.streaming else answer.content
    headers = {k: v for k, v in answer.items()}
    return AWSResponse(request.url, answer.status_code, headers, _Raw(content))


def sagemaker(key_id: str, secret: str, *, region: str = "us-east-1", endpoint: str = ENDPOINT):
    """boto3's ``sagemaker`` client, signed with this key pair, served in process."""
    client = boto3.client(
        "sagemaker",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )
    client.meta.events.register("before-send", _via_django)
    return client
