"""Our SDK talking to the test's own Django in process (no server, the test's database)."""

from __future__ import annotations

import httpx
from django.test import Client


class DjangoTransport(httpx.BaseTransport):
    """The SDK's requests, answered by the test's Django (its database included)."""

    def __init__(self) -> None:
        self.client = Client()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        skip = {"host", "content-length", "content-type"}
        response = self.client.generic(
            request.method,
            request.url.raw_path.decode(),
            request.read(),
            content_type=request.headers.get("content-type", "application/octet-stream"),
            headers={k: v for k, v in request.headers.items() if k.lower() not in skip},
        )
        content = b"".join(response.streaming_content) if response.streaming else response.content
        return httpx.Response(response.status_code, headers=list(response.items()), content=content)
