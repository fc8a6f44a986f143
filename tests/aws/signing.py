"""Requests signed as botocore signs them (header form and presigned URLs), for the tests of
the SigV4 verifier and the SageMaker faces; a client whose clock is off is botocore's signer
with its clock set."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import UTC, datetime
from unittest import mock
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from django.test import RequestFactory

JSON_1_1 = "application/x-amz-json-1.1"


@contextmanager
def client_clock(when: datetime | None):
    """botocore's signer reads the time from ``botocore.auth.get_current_datetime``."""
    if when is None:
        yield
        return
    with mock.patch("botocore.auth.get_current_datetime", return_value=when.astimezone(UTC)):
        yield


def signed(
    key_id: str,
    secret: str,
    *,
    url: str = "http://testserver/sagemaker",
    target: str | None = "SageMaker.ListTrainingSessions",
    body: bytes | dict = b"{}",
    region: str = "us-east-1",
    service: str = "sagemaker",
    when: datetime | None = None,
    headers: dict | None = None,
    method: str = "POST",
) -> AWSRequest:
    """An AWSRequest signed in the header form."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    all_headers = {"Content-Type": JSON_1_1, **({"X-Amz-Target": target} if target else {})}
    request = AWSRequest(
        method=method, url=url, data=body, headers={**all_headers, **(headers or {})}
    )
    with client_clock(when):
        SigV4Auth(Credentials(key_id, secret), service, region).add_auth(request)
    return request


def presigned(
    key_id: str,
    secret: str,
    *,
    url: str = "http://testserver/sagemaker",
    target: str = "SageMaker.ListTrainingSessions",
    expires: int = 60,
    region: str = "us-east-1",
    when: datetime | None = None,
    method: str = "POST",
) -> AWSRequest:
    """An AWSRequest whose URL carries its signature (botocore's presigned-query form)."""
    request = AWSRequest(method=method, url=url, data=b"", headers={"X-Amz-Target": target})
    with client_clock(when):
        SigV4QueryAuth(Credentials(key_id, secret), "sagemaker", region, expires=expires).add_auth(
            request
        )
    return request


def as_django(request: AWSRequest, **overrides):
    """The same request as Django receives it (RequestFactory), optionally altered."""
    parts = urlsplit(request.url)
    meta = {"QUERY_STRING": parts.query, "HTTP_HOST": parts.netloc}
    body = request.body or b""
    if isinstance(body, str):
        body = body.encode()
    content_type = None
    for name, value in request.headers.items():
        if name.lower() == "content-type":
            content_type = value
            continue
        meta["HTTP_" + name.upper().replace("-", "_")] = value
    meta.update(overrides)
    factory = RequestFactory()
    return factory.generic(
        request.method,
        parts.path,
        data=body,
        content_type=content_type or "application/octet-stream",
        **meta,
    )


def send(client, key_id: str, secret: str, target: str, body: bytes, **sign_kw):
    """``body`` signed for ``target`` and posted through the whole Django stack (``client``:
    django.test.Client); the response."""
    request = signed(key_id, secret, target=target, body=body, **sign_kw)
    meta = {
        "HTTP_" + name.upper().replace("-", "_"): value
        for name, value in request.headers.items()
        if name.lower() != "content-type"
    }
    meta["HTTP_HOST"] = urlsplit(request.url).netloc
    meta["CONTENT_TYPE"] = JSON_1_1  # the test client leaves it out of an empty body's request
    return client.generic(
        "POST", urlsplit(request.url).path, data=body, content_type=JSON_1_1, **meta
    )
