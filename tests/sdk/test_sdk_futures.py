"""APIFuture: waiting, failures reported by the server, timeouts, combining several futures."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
from fake_server import API_KEY, BASE_MODEL, FakeServer

import loopwright
from loopwright import APIFuture, CombinedAPIFuture, ServiceClient
from loopwright.types import AdamParams
from tests.support.data import small_datum


def test_a_failed_operation_raises_with_its_category(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    # ppo needs logprobs and advantages: the server blames the request
    bad = client.forward_backward([small_datum()], "ppo")
    server.fail_operation("optim_step", "worker lost", "server")
    optim = client.optim_step(AdamParams())
    with pytest.raises(loopwright.RequestFailedError) as user:
        bad.result(timeout=10)
    assert user.value.category == "user"
    assert "logprobs is required" in user.value.message
    assert user.value.request_id is not None
    with pytest.raises(loopwright.RequestFailedError) as server_fault:
        optim.result(timeout=10)
    assert server_fault.value.category == "server"
    assert isinstance(optim.exception(), loopwright.RequestFailedError)
    # later operations still run
    client.optim_step(AdamParams()).result(timeout=10)


def test_a_model_lost_for_good_names_where_to_resume(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    saved = f"tinker://{client.model_id}/weights/s1"
    server.fail_operation(
        "optim_step",
        f"model {client.model_id} could not be restored: …; resume from {saved}",
        detail={"code": "model_lost", "resume_from": saved},
    )
    with pytest.raises(loopwright.ModelLostError) as lost:
        client.optim_step(AdamParams()).result(timeout=10)
    assert lost.value.resume_from == saved and lost.value.category == "server"
    assert isinstance(lost.value, loopwright.RequestFailedError)  # caught as before, too
    server.fail_operation(
        "optim_step", "lost, never saved", detail={"code": "model_lost", "resume_from": None}
    )
    with pytest.raises(loopwright.ModelLostError) as never_saved:
        client.optim_step(AdamParams()).result(timeout=10)
    assert never_saved.value.resume_from is None


def test_timeout_leaves_the_operation_running(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    server.hold = True
    future = client.optim_step(AdamParams())
    with pytest.raises(TimeoutError):
        future.result(timeout=0.05)
    assert not future.done()
    server.hold = False
    assert future.result(timeout=10).metrics is not None
    assert future.done() and future.exception() is None


def test_pending_answers_are_polled_again(server: FakeServer) -> None:
    server.pending_polls = 6  # alternates HTTP 408 and {"type": "try_again"}
    with ServiceClient(api_key=API_KEY, transport=server.transport) as service:
        client = service.create_lora_training_client(BASE_MODEL, rank=4)
        client.optim_step(AdamParams()).result(timeout=10)
    assert len(server.calls("retrieve_future")) >= 12


def test_an_unreadable_result_is_reported(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    server.fail_operation("optim_step", "x")
    future = client.optim_step(AdamParams())
    with pytest.raises(loopwright.RequestFailedError):
        future.result(timeout=10)
    server.op_failures.clear()
    original = server._complete

    def garbage(op: object) -> None:
        op.outcome = {"sequences": "not a list"}  # type: ignore[attr-defined]

    server._complete = garbage  # type: ignore[method-assign]
    sampler = client.create_sampling_client()
    with pytest.raises(loopwright.APIResponseValidationError):
        sampler.sample([1, 2]).result(timeout=10)
    server._complete = original  # type: ignore[method-assign]


def test_futures_after_close_fail_clearly(server: FakeServer) -> None:
    service = ServiceClient(api_key=API_KEY, transport=server.transport)
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    server.hold = True
    future = client.optim_step(AdamParams())
    service.close()
    with pytest.raises(loopwright.LoopwrightError, match="closed"):
        future.result(timeout=5)
    with pytest.raises(loopwright.LoopwrightError, match="closed"):
        client.optim_step(AdamParams())


def _done(value: object) -> APIFuture[object]:
    inner: concurrent.futures.Future[object] = concurrent.futures.Future()
    inner.set_result(value)
    return APIFuture(inner)


def test_combined_future_merges_in_order() -> None:
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    combined = CombinedAPIFuture([_done(1), APIFuture(pending), _done(3)], sum)
    assert not combined.done()
    pending.set_result(2)
    assert combined.result(timeout=1) == 6
    assert CombinedAPIFuture([], lambda r: len(r)).result() == 0


def test_combined_future_fails_with_the_first_failure() -> None:
    failing: concurrent.futures.Future[int] = concurrent.futures.Future()
    never: concurrent.futures.Future[int] = concurrent.futures.Future()
    combined = CombinedAPIFuture([APIFuture(never), APIFuture(failing)], sum)
    failing.set_exception(loopwright.RequestFailedError("bad", "user"))
    with pytest.raises(loopwright.RequestFailedError):
        combined.result(timeout=1)


def test_futures_can_be_awaited_from_any_loop() -> None:
    future = _done(7)

    async def main() -> tuple[object, object]:
        return await future, await future.result_async(timeout=1)

    assert asyncio.run(main()) == (7, 7)

    never: concurrent.futures.Future[int] = concurrent.futures.Future()

    async def times_out() -> None:
        await APIFuture(never).result_async(timeout=0.01)

    with pytest.raises(TimeoutError):
        asyncio.run(times_out())
    assert not never.cancelled()  # the operation itself is not cancelled
