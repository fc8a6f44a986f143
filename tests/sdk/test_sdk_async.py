"""The async twins, used from the caller's own event loop."""

from __future__ import annotations

import asyncio

import pytest
from fake_server import BASE_MODEL, FakeServer

from loopwright import APIFuture, ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams

DATUM = Datum(
    model_input=ModelInput.from_ints([1, 2, 3]),
    loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
)


def test_an_async_training_loop(server: FakeServer, service: ServiceClient) -> None:
    async def main() -> None:
        assert (await service.list_base_models_async())[0].name == BASE_MODEL
        client = await service.create_lora_training_client_async(BASE_MODEL, rank=4, seed=1)
        sampler = await client.create_sampling_client_async()
        params = SamplingParams(max_tokens=3)
        responses = await asyncio.gather(
            *(sampler.sample_async([1, 2, 3], 2, params) for _ in range(20))
        )
        assert all(len(r.sequences) == 2 for r in responses)
        logprobs = await sampler.compute_logprobs_async([2, 3, 4])
        assert logprobs[0] is None and len(logprobs) == 3

        fwd_bwd = await client.forward_backward_async([DATUM], "cross_entropy")
        optim = await client.optim_step_async(AdamParams(learning_rate=1e-3))
        assert isinstance(fwd_bwd, APIFuture) and isinstance(optim, APIFuture)
        result, _ = await asyncio.gather(fwd_bwd, optim)
        assert result.metrics["loss:sum"] > 0
        forward = await (await client.forward_async([DATUM])).result_async(timeout=10)
        assert len(forward.loss_fn_outputs) == 1

        state = await (await client.save_state_async("a")).result_async()
        assert state.path.endswith("/weights/a")
        await (await client.load_state_with_optimizer_async(state.path))
        await (await client.load_state_async(state.path))
        saved = await (await client.save_weights_for_sampler_async("s", merge_weights=True))
        fresh = await client.save_weights_and_get_sampling_client_async()
        named = await client.save_weights_and_get_sampling_client_async("named")
        for sampling in (fresh, named):
            assert len((await sampling.sample_async([1], 1)).sequences) == 1
        assert (await client.get_info_async()).model_id == client.model_id
        await (await client.unload_async())
        assert (await client.stop_async()).state == "stopped"
        assert saved.path.endswith("/sampler_weights/s")

    asyncio.run(main())
    model = next(iter(server.models.values()))
    assert [s for s, _ in model.executed] == list(range(1, 10))


def test_results_can_be_awaited_while_the_loop_does_other_work(
    server: FakeServer, service: ServiceClient
) -> None:
    sampler = service.create_sampling_client(base_model=BASE_MODEL)

    async def main() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        server.hold = True
        future = sampler.sample([1, 2], 1)
        await asyncio.sleep(0.05)
        server.hold = False
        await future
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ticks

    assert asyncio.run(main()) > 5  # the caller's loop was never blocked
