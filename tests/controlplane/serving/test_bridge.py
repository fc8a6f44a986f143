"""The WSGI bridge behind uvicorn, driven as uvicorn drives it (an ASGI scope, ``receive`` and
``send``): a response that is not streamed goes out whole once the app has returned, a streamed
one chunk by chunk as the app yields (a chunk is sent before the app goes on), and a
client that goes stops the app."""

from __future__ import annotations

import asyncio
import threading

from django.http import HttpResponse, StreamingHttpResponse

from controlplane.serving.bridge import WsgiBridge

SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/x",
    "raw_path": b"/x",
    "query_string": b"",
    "root_path": "",
    "headers": [(b"host", b"testserver")],
    "client": ("127.0.0.1", 5000),
    "server": ("127.0.0.1", 8000),
}


def _serve(app, *, disconnect_after: int | None = None) -> list[dict]:
    """Run one request through a bridge; the messages sent. ``disconnect_after``: the client
    goes once that many messages were sent."""
    sent: list[dict] = []

    async def run() -> None:
        bridge = WsgiBridge(app, threads=2, max_body=1024, write_timeout=5)
        went = asyncio.Event()
        asked = 0

        async def receive() -> dict:
            nonlocal asked
            asked += 1
            if asked == 1:
                return {"type": "http.request", "body": b"", "more_body": False}
            await went.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if disconnect_after is not None and len(sent) >= disconnect_after:
                went.set()
                await asyncio.sleep(0.05)  # the watcher sees the client go

        await bridge(SCOPE, receive, send)
        went.set()

    asyncio.run(run())
    return sent


def test_a_response_not_streamed_goes_out_whole_after_the_app_returns() -> None:
    closed = threading.Event()

    def app(environ, start_response):
        response = HttpResponse(b'{"ok":true}', content_type="application/json")
        response._resource_closers.append(closed.set)
        start_response("200 OK", [("Content-Type", "application/json")])
        return response

    sent = _serve(app)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert sent[1]["body"] == b'{"ok":true}' and sent[1]["more_body"] is False
    assert closed.is_set()


def test_a_streamed_response_goes_out_chunk_by_chunk_then_ends() -> None:
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/x-ndjson")])
        return StreamingHttpResponse(iter([b"handle\n", b"outcome\n"]))

    sent = _serve(app)
    bodies = [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]
    assert sent[0]["type"] == "http.response.start"
    assert bodies == [(b"handle\n", True), (b"outcome\n", True), (b"", False)]


def test_the_first_chunk_is_out_before_the_app_goes_on() -> None:
    out: list[dict] = []
    first_out = threading.Event()
    order: list[str] = []

    def app(environ, start_response):
        def lines():
            yield b"handle\n"
            # the bridge handed the first chunk to the loop and it was sent before this runs
            order.append("first sent" if first_out.is_set() else "first not sent")
            yield b"outcome\n"

        start_response("200 OK", [("Content-Type", "application/x-ndjson")])
        return StreamingHttpResponse(lines(), content_type="application/x-ndjson")

    async def run() -> None:
        bridge = WsgiBridge(app, threads=2, max_body=1024, write_timeout=5)
        done = asyncio.Event()
        first = True

        async def receive() -> dict:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            out.append(message)
            if message.get("body") == b"handle\n":
                first_out.set()

        await bridge(SCOPE, receive, send)
        done.set()

    asyncio.run(run())
    assert order == ["first sent"]
    assert [m["type"] for m in out][:2] == ["http.response.start", "http.response.body"]


def test_a_client_that_goes_stops_a_streamed_response() -> None:
    made: list[int] = []
    closed = threading.Event()

    def app(environ, start_response):
        def lines():
            for i in range(1000):
                made.append(i)
                yield b"line\n"

        start_response("200 OK", [("Content-Type", "application/x-ndjson")])
        response = StreamingHttpResponse(lines(), content_type="application/x-ndjson")
        response._resource_closers.append(closed.set)
        return response

    sent = _serve(app, disconnect_after=3)
    assert closed.is_set()
    assert len(made) < 1000
    assert not any(m.get("more_body") is False for m in sent)  # never ended as if complete
