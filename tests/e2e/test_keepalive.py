"""One bad request never costs the next one on the same keep-alive connection: against the real
gunicorn, a body a view never read (logout, client config, telemetry, a refusal before parsing)
is drained, and the connection carries the next request; charlie (another tenant) asking on it
for alice's session gets a 404."""

from __future__ import annotations

import json
import socket

import pytest

pytestmark = pytest.mark.e2e


class Connection:
    """One HTTP/1.1 connection, spoken by hand so that nothing reconnects behind the test."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.buffer = b""

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return self._response()

    def _response(self) -> tuple[int, dict, bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
        length = int(headers.get("content-length", 0))
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    "path, auth, status",
    [
        ("/api/v1/auth/logout", False, 200),
        ("/api/v1/client/config", True, 200),
        ("/api/v1/telemetry", True, 200),
        ("/api/v1/client/config", False, 401),  # refused before anything reads the body
        ("/api/v1/create_session", True, 400),  # read, and refused
        ("/v1/chat/completions", False, 401),
    ],
)
def test_an_unread_body_does_not_cost_the_next_request(pg_stack, path, auth, status) -> None:
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["X-API-Key"] = pg_stack.keys["alice"]
    body = json.dumps({"padding": "x" * 300_000}).encode()
    conn = Connection(pg_stack.url)
    try:
        for _ in range(2):
            code, _, _ = conn.request("POST", path, body, headers)
            assert code == status
            code, answer_headers, answer = conn.request("GET", "/api/v1/healthz")
            assert code == 200 and json.loads(answer) == {"status": "ok"}
            assert answer_headers.get("connection", "keep-alive").lower() != "close"
    finally:
        conn.close()


def test_charlie_gets_404_on_a_kept_connection(pg_stack) -> None:
    conn = Connection(pg_stack.url)
    alice = {"X-API-Key": pg_stack.keys["alice"], "Content-Type": "application/json"}
    charlie = {"X-API-Key": pg_stack.keys["charlie"]}
    try:
        body = json.dumps({"tags": [], "sdk_version": "test", "role_arn": pg_stack.roles["alice"]})
        code, _, answer = conn.request("POST", "/api/v1/create_session", body.encode(), alice)
        assert code == 200, answer
        session = json.loads(answer)["session_id"]
        code, _, _ = conn.request("POST", "/api/v1/telemetry", b"x" * 200_000, charlie)
        assert code in (200, 400)
        code, _, answer = conn.request("GET", f"/api/v1/sessions/{session}", b"", charlie)
        assert code == 404 and json.loads(answer)["code"] == "not_found"
        code, _, _ = conn.request("POST", f"/api/v1/sessions/{session}/stop", b"", alice)
        assert code == 200
    finally:
        conn.close()
