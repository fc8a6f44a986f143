"""The HTTP seam: configuration from the environment, retries with backoff, the error ladder."""

from __future__ import annotations

import http.server
import json
import random
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from fake_server import API_KEY, BASE_MODEL, FAST_RETRY, FakeServer

import loopwright
from loopwright import RetryPolicy, ServiceClient
from loopwright._http import HTTPClient, _Attempts
from loopwright.types import AdamParams, Datum, ModelInput

NO_RETRY = RetryPolicy(max_retry_seconds=0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recording(
    answer: Callable[[httpx.Request, int], httpx.Response],
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request, len(seen))

    return httpx.MockTransport(handler), seen


def ok(request: httpx.Request, n: int) -> httpx.Response:
    return httpx.Response(200, json={"base_models": []})


def test_key_and_base_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWRIGHT_API_KEY", "tml-from-env")
    monkeypatch.setenv("LOOPWRIGHT_BASE_URL", "https://lw.example.com/")
    transport, seen = recording(ok)
    with ServiceClient(transport=transport) as client:
        assert client.base_url == "https://lw.example.com"
        assert client.list_base_models() == []
    assert str(seen[0].url) == "https://lw.example.com/api/v1/base_models"
    assert seen[0].headers["X-API-Key"] == "tml-from-env"


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWRIGHT_API_KEY", "tml-from-env")
    transport, seen = recording(ok)
    with ServiceClient("http://other:9000", "tml-arg", transport=transport) as client:
        client.list_base_models()
    assert str(seen[0].url) == "http://other:9000/api/v1/base_models"
    assert seen[0].headers["X-API-Key"] == "tml-arg"


def test_default_base_url_and_missing_key() -> None:
    with pytest.raises(loopwright.LoopwrightError, match="LOOPWRIGHT_API_KEY"):
        ServiceClient()
    http = HTTPClient(api_key="tml-x")
    assert http.base_url == "http://127.0.0.1:8000"
    http.close()


def test_retries_5xx_then_succeeds_with_the_same_body(
    server: FakeServer, service: ServiceClient
) -> None:
    server.fail_http("create_session", 503, times=2)
    server.fail_http("create_session", 500)
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    bodies = server.calls("create_session")
    assert len(bodies) == 4 and all(b == bodies[0] for b in bodies)
    assert client.model_id in server.models


def test_429_honours_retry_after(server: FakeServer) -> None:
    server.fail_http("base_models", 429, headers={"Retry-After": "0.2"})
    with ServiceClient(api_key=API_KEY, transport=server.transport, retry=FAST_RETRY) as client:
        started = time.monotonic()
        assert client.list_base_models()[0].name == BASE_MODEL
        assert time.monotonic() - started >= 0.2
    assert len(server.calls("base_models")) == 2


def test_retry_after_beyond_the_budget_gives_up(server: FakeServer) -> None:
    server.fail_http("base_models", 429, headers={"Retry-After": "60"})
    with (
        ServiceClient(api_key=API_KEY, transport=server.transport, retry=FAST_RETRY) as client,
        pytest.raises(loopwright.RateLimitError),
    ):
        client.list_base_models()
    assert len(server.calls("base_models")) == 1


def test_connection_errors_are_retried(server: FakeServer, service: ServiceClient) -> None:
    server.drop("base_models", times=3)
    assert service.list_base_models()[0].name == BASE_MODEL
    assert len(server.calls("base_models")) == 4


def test_retried_operations_are_idempotent_by_seq_id(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]},
    )
    server.drop_after("forward_backward")  # handled, but the answer is lost
    server.drop("optim_step")
    server.fail_http("retrieve_future", 502, times=3)
    fwd_bwd = client.forward_backward([datum], "cross_entropy")
    optim = client.optim_step(AdamParams())
    fwd_bwd.result(timeout=10), optim.result(timeout=10)
    sent = server.calls("forward_backward")
    assert len(sent) == 2 and sent[0] == sent[1]
    assert server.models[client.model_id].executed == [(1, "forward_backward"), (2, "optim_step")]


def test_400_is_not_retried_and_carries_detail_and_field(
    server: FakeServer, service: ServiceClient
) -> None:
    with pytest.raises(loopwright.BadRequestError) as info:
        service.create_sampling_client(model_path="tinker://m/sampler_weights/x", base_model="b")
    error = info.value
    assert error.status_code == 400
    assert error.detail == "give one of base_model, model_path, model_id"
    assert error.code == "invalid"
    assert len(server.calls("create_sampling_session")) == 1
    with pytest.raises(loopwright.NotFoundError) as missing:
        service.create_sampling_client(model_path="tinker://m/sampler_weights/x")
    assert missing.value.field == "model_path"


def test_bad_key_is_an_authentication_error(server: FakeServer) -> None:
    with (
        ServiceClient(api_key="tml-wrong", transport=server.transport) as client,
        pytest.raises(loopwright.AuthenticationError) as info,
    ):
        client.list_base_models()
    assert info.value.code == "authentication_failed"


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, loopwright.BadRequestError),
        (401, loopwright.AuthenticationError),
        (402, loopwright.PaymentRequiredError),
        (403, loopwright.PermissionDeniedError),
        (404, loopwright.NotFoundError),
        (409, loopwright.ConflictError),
        (410, loopwright.GoneError),
        (413, loopwright.PayloadTooLargeError),
        (422, loopwright.UnprocessableEntityError),
        (429, loopwright.RateLimitError),
        (418, loopwright.APIStatusError),
        (500, loopwright.InternalServerError),
        (503, loopwright.InternalServerError),
    ],
)
def test_each_status_maps_to_its_error(status: int, cls: type[Exception]) -> None:
    body = {"detail": "nope", "code": "some_code", "field": "rank"}
    transport, seen = recording(lambda r, n: httpx.Response(status, json=body))
    with (
        ServiceClient(api_key=API_KEY, transport=transport, retry=NO_RETRY) as client,
        pytest.raises(cls) as info,
    ):
        client.list_base_models()
    error = info.value
    assert type(error) is cls
    assert isinstance(error, loopwright.APIStatusError) and isinstance(error, loopwright.APIError)
    assert (error.status_code, error.detail, error.field, error.code) == (
        status,
        "nope",
        "rank",
        "some_code",
    )
    assert "nope" in str(error) and "(rank)" in str(error)
    assert len(seen) == 1


def test_a_non_json_error_body_still_maps() -> None:
    transport, _ = recording(lambda r, n: httpx.Response(502, text="<html>bad gateway</html>"))
    with (
        ServiceClient(api_key=API_KEY, transport=transport, retry=NO_RETRY) as client,
        pytest.raises(loopwright.InternalServerError) as info,
    ):
        client.list_base_models()
    assert info.value.detail == "<html>bad gateway</html>"
    assert info.value.field is None


def test_retrying_stops_within_the_budget() -> None:
    transport, seen = recording(lambda r, n: httpx.Response(503, json={"detail": "down"}))
    policy = RetryPolicy(max_retry_seconds=0.3, initial_delay=0.01, max_delay=0.05)
    with ServiceClient(api_key=API_KEY, transport=transport, retry=policy) as client:
        started = time.monotonic()
        with pytest.raises(loopwright.InternalServerError):
            client.list_base_models()
        assert time.monotonic() - started < 1.0
    assert len(seen) > 3


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (httpx.ConnectError, loopwright.APIConnectionError),
        (httpx.ReadTimeout, loopwright.APITimeoutError),
    ],
)
def test_no_answer_becomes_a_connection_error(exc: type[Exception], cls: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("down", request=request)  # type: ignore[call-arg]

    policy = RetryPolicy(max_retry_seconds=0.05, initial_delay=0.01)
    with (
        ServiceClient(api_key=API_KEY, transport=httpx.MockTransport(handler), retry=policy) as c,
        pytest.raises(cls),
    ):
        c.list_base_models()


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=8.0, jitter=0.0)
    assert [policy.delay(n) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    jittered = RetryPolicy(initial_delay=1.0, jitter=0.25)
    assert all(0.75 <= jittered.delay(0) <= 1.25 for _ in range(50))


def test_a_refused_connection_is_retried_within_a_short_delay() -> None:
    """A server starting again refuses connections: the client tries again at least every
    ``refused_max_delay``, not at the growing backoff (a connection that was accepted and then
    got no answer still backs off to ``max_delay``)."""
    policy = RetryPolicy(initial_delay=0.5, max_delay=16.0, refused_max_delay=2.0, jitter=0.0)
    request = httpx.Request("POST", "http://127.0.0.1:1/api/v1/retrieve_future")
    refused = _Attempts(policy, enabled=True)
    assert [
        refused.after_error(httpx.ConnectError("refused", request=request)) for _ in range(7)
    ] == [
        0.5,
        1.0,
        2.0,
        2.0,
        2.0,
        2.0,
        2.0,
    ]
    silent = _Attempts(policy, enabled=True)
    assert [
        silent.after_error(httpx.ReadTimeout("no answer", request=request)) for _ in range(7)
    ] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        16.0,
    ]


def test_a_refused_connection_is_retried_until_the_server_listens() -> None:
    """Through the real transport: a port where nothing listens yet, then a server on it. What
    the client met before is a refused connection (``httpx.ConnectError``, the short delays
    above), and the request that started before the server succeeds once it listens."""
    port = free_port()
    refused = threading.Event()

    def serve_later() -> None:
        refused.wait(30)  # once the client has met the closed port
        time.sleep(0.3)
        server = http.server.HTTPServer(("127.0.0.1", port), _Models)
        server.handle_request()
        server.server_close()

    class Seen(httpx.HTTPTransport):
        errors: list[type[Exception]] = []

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            try:
                return super().handle_request(request)
            except Exception as exc:
                self.errors.append(type(exc))
                refused.set()
                raise

    thread = threading.Thread(target=serve_later)
    thread.start()
    policy = RetryPolicy(max_retry_seconds=30.0, initial_delay=0.05, refused_max_delay=0.2)
    with ServiceClient(
        base_url=f"http://127.0.0.1:{port}", api_key=API_KEY, retry=policy, transport=Seen()
    ) as client:
        models = client.list_base_models()
    thread.join()
    assert [m.name for m in models] == ["m"]
    assert Seen.errors and set(Seen.errors) == {httpx.ConnectError}


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"base_models": [{"name": "m", "context_length": 512}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_jitter_leaves_the_global_random_stream_alone() -> None:
    # a user's loop seeds ``random``; retries in the SDK's background thread must not move it
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    delays = {RetryPolicy(initial_delay=1.0, jitter=0.25).delay(0) for _ in range(20)}
    assert [random.random() for _ in range(3)] == expected
    assert len(delays) > 1  # still jittered
