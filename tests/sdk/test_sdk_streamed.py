"""Outcomes on the submit's own response: the SDK asks for them (``Prefer: wait``) and, where
the server streams them, sends one request per operation instead of a submit and a poll. A
try-again, a stream that breaks off and a server that answers with the handle alone all end in
polling, and never in a second submit."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fake_server import API_KEY, BASE_MODEL, FAST_RETRY, FakeServer

import loopwright
from loopwright import ServiceClient
from loopwright._http import HTTPClient
from loopwright.futures import await_future, send_request
from loopwright.types import AdamParams, ModelInput, SamplingParams
from tests.support.data import small_datum


@pytest.fixture
def streaming(server: FakeServer) -> FakeServer:
    server.streams = True
    return server


def test_a_training_loop_sends_one_request_per_operation(
    streaming: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    for _ in range(3):
        fwd = client.forward_backward([small_datum()], "cross_entropy")
        optim = client.optim_step(AdamParams(learning_rate=1e-3))
        assert "loss:sum" in fwd.result(timeout=10).metrics
        assert optim.result(timeout=10).metrics is not None
    sampler = client.save_weights_and_get_sampling_client()
    sampled = sampler.sample(ModelInput.from_ints([1, 2]), 2, SamplingParams(max_tokens=3))
    assert len(sampled.result(timeout=10).sequences) == 2
    assert streaming.calls("retrieve_future") == []
    assert streaming.streamed.count("forward_backward") == 3
    assert streaming.streamed.count("optim_step") == 3
    assert "asample" in streaming.streamed and "create_model" in streaming.streamed
    model = streaming.models[client.model_id]
    assert [seq for seq, _ in model.executed] == list(range(1, len(model.executed) + 1))


def test_a_try_again_is_polled(streaming: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    streaming.stream_pending = 1
    assert client.optim_step(AdamParams()).result(timeout=10).metrics is not None
    assert len(streaming.calls("optim_step")) == 1
    assert len(streaming.calls("retrieve_future")) >= 1


def test_a_stream_that_breaks_off_after_the_handle_is_polled_not_sent_again(
    streaming: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    streaming.cut_streams = 1
    out = client.forward_backward([small_datum()], "cross_entropy").result(timeout=10)
    assert "loss:sum" in out.metrics
    assert len(streaming.calls("forward_backward")) == 1
    assert len(streaming.calls("retrieve_future")) >= 1


def test_a_streamed_failure_raises_with_its_category(
    streaming: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    streaming.fail_operation("optim_step", "worker lost", "server")
    with pytest.raises(loopwright.RequestFailedError) as failed:
        client.optim_step(AdamParams()).result(timeout=10)
    assert failed.value.category == "server" and failed.value.message == "worker lost"
    assert failed.value.request_id is not None
    assert streaming.calls("retrieve_future") == []
    client.optim_step(AdamParams()).result(timeout=10)  # the model goes on


def test_a_server_that_does_not_stream_is_polled(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    assert client.optim_step(AdamParams()).result(timeout=10).metrics is not None
    assert server.streamed == [] and len(server.calls("retrieve_future")) >= 1


def test_beyond_its_held_answers_a_client_submits_plainly(streaming: FakeServer) -> None:
    """With every answer it may hold open taken, a submit comes back with its handle alone (a
    large fan-out of samples never waits for a connection to send)."""
    service = ServiceClient(api_key=API_KEY, transport=streaming.transport, retry=FAST_RETRY)
    try:
        sampler = service.create_sampling_client(base_model=BASE_MODEL)
        body = {
            "sampling_session_id": sampler.sampling_session_id,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
            "num_samples": 1,
            "sampling_params": {"max_tokens": 2},
        }
    finally:
        service.close()

    async def run() -> list:
        http = HTTPClient(
            api_key=API_KEY, transport=streaming.transport, retry=FAST_RETRY, max_inline_waits=2
        )
        try:
            sent = await asyncio.gather(
                *(send_request(http, "asample", {**body, "seq_id": i}) for i in range(1, 6))
            )
            assert http.take_inline_wait() is False  # two answers held open
            results = await asyncio.gather(*(await_future(http, s, dict) for s in sent))
            assert http.take_inline_wait() and http.take_inline_wait()  # given back
            return results
        finally:
            await http.aclose()
            http.close()

    results = asyncio.run(run())
    assert len(results) == 5 and all(len(r["sequences"]) == 1 for r in results)
    assert streaming.streamed.count("asample") == 2
    assert len(streaming.calls("asample")) == 5


def test_the_submit_asks_to_wait(streaming: FakeServer, service: ServiceClient) -> None:
    seen: list[str | None] = []
    handle = streaming.handle

    def spy(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/optim_step"):
            seen.append(request.headers.get("Prefer"))
        return handle(request)

    streaming.transport.handler = spy
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    client.optim_step(AdamParams()).result(timeout=10)
    assert seen == ["wait=25"]


def test_a_bad_answer_gives_its_held_slot_back_once() -> None:
    """However a streamed submit ends (an answer that is not JSON, a server that cannot be
    reached, a cancelled call), the slot it took is given back, and only once."""

    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>a proxy's page</html>")

    async def hangs(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(60)
        raise AssertionError("never answered")

    async def run() -> None:
        http = HTTPClient(
            api_key=API_KEY,
            transport=httpx.MockTransport(html),
            retry=FAST_RETRY,
            max_inline_waits=2,
        )
        for _ in range(3):
            with pytest.raises(loopwright.APIResponseValidationError):
                await send_request(http, "optim_step", {"model_id": "m", "seq_id": 1})
        assert [http.take_inline_wait() for _ in range(3)] == [True, True, False]
        http.release_inline_wait(), http.release_inline_wait()
        await http.aclose()
        http.close()

        slow = HTTPClient(
            api_key=API_KEY,
            transport=httpx.MockTransport(hangs),
            retry=FAST_RETRY,
            max_inline_waits=1,
        )
        task = asyncio.ensure_future(send_request(slow, "optim_step", {"model_id": "m"}))
        await asyncio.sleep(0.05)
        assert slow.take_inline_wait() is False  # held by the call in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert slow.take_inline_wait() is True
        await slow.aclose()
        slow.close()

    asyncio.run(run())
