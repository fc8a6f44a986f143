"""A small stand-in for the Stripe API over HTTP: customers (with idempotency keys) and v1 meter
events (de-duplicated by identifier), keeping what it received; it can fail the next requests."""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

API_KEY = "sk_test_loopwright"


def form(body: bytes) -> dict:
    """Stripe's form encoding (``payload[value]=1``) as nested dicts."""
    out: dict = {}
    for key, value in parse_qsl(body.decode(), keep_blank_values=True):
        if "[" in key:
            outer, inner = key.rstrip("]").split("[", 1)
            out.setdefault(outer, {})[inner] = value
        else:
            out[key] = value
    return out


@dataclass
class StripeState:
    customers: dict[str, dict] = field(default_factory=dict)
    events: dict[str, dict] = field(default_factory=dict)  # by identifier, first one wins
    received: list[tuple[str, str, dict]] = field(default_factory=list)  # method, path, body
    replies: dict[str, tuple[int, dict]] = field(default_factory=dict)  # by idempotency key
    failures: list[tuple[str, str | None]] = field(default_factory=list)  # (mode, path)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def fail_next(self, n: int, mode: str = "500", path: str | None = None) -> None:
        """Fail the next ``n`` requests (to ``path`` only, if given): ``500``, ``reset`` (the
        connection, before handling the request) or ``reset_after`` (handled, reply lost)."""
        with self.lock:
            self.failures = [(mode, path)] * n

    def take_failure(self, path: str) -> str | None:
        with self.lock:
            for i, (mode, only) in enumerate(self.failures):
                if only in (None, path):
                    del self.failures[i]
                    return mode
        return None

    def event_posts(self) -> list[dict]:
        return [body for method, path, body in self.received if path == "/v1/billing/meter_events"]


class Handler(BaseHTTPRequestHandler):
    state: StripeState

    def log_message(self, format, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._reply(404, {"error": {"type": "invalid_request_error", "message": "unknown"}})

    def do_POST(self) -> None:
        body = form(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        state = self.state
        mode = state.take_failure(self.path)
        if mode == "reset":
            return self._reset()
        if mode == "500":
            return self._reply(500, {"error": {"type": "api_error", "message": "try again"}})
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            return self._reply(401, {"error": {"type": "invalid_request_error", "message": "key"}})
        with state.lock:
            state.received.append(("POST", self.path, body))
            key = self.headers.get("Idempotency-Key")
            if key and key in state.replies:
                status, reply = state.replies[key]
            else:
                status, reply = self._handle(body)
                if key:
                    state.replies[key] = (status, reply)
        if mode == "reset_after":
            return self._reset()
        self._reply(status, reply)

    def _handle(self, body: dict) -> tuple[int, dict]:
        state = self.state
        if self.path == "/v1/customers":
            customer = {
                "id": f"cus_{next(state.ids):06d}",
                "object": "customer",
                "name": body.get("name"),
                "metadata": body.get("metadata") or {},
            }
            state.customers[customer["id"]] = customer
            return 200, customer
        if self.path == "/v1/billing/meter_events":
            payload = body.get("payload") or {}
            if payload.get("stripe_customer_id") not in state.customers:
                return 400, {"error": {"type": "invalid_request_error", "message": "customer"}}
            event = {
                "object": "billing.meter_event",
                "event_name": body["event_name"],
                "identifier": body["identifier"],
                "payload": payload,
                "timestamp": int(body["timestamp"]),
            }
            return 200, state.events.setdefault(body["identifier"], event)
        return 404, {"error": {"type": "invalid_request_error", "message": "unknown path"}}

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True


class StripeServer:
    """Serves on 127.0.0.1 and a free port, in a thread, until ``stop``."""

    def __init__(self) -> None:
        self.state = StripeState()
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> StripeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def reset(self) -> None:
        fresh = StripeState()
        for name in ("customers", "events", "received", "replies", "failures"):
            setattr(self.state, name, getattr(fresh, name))
