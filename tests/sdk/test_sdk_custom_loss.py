"""forward_backward_custom: the server gets cross_entropy with weights = −dC/dlogprob."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_server import BASE_MODEL, FakeServer, logprob_of

from loopwright import ServiceClient
from loopwright._custom_loss import forward_data
from loopwright.types import Datum, ModelInput

torch = pytest.importorskip("torch")

COEF = [[1.0, 2.0, 3.0], [0.5, -1.0]]


def data() -> list[Datum]:
    return [
        Datum(
            model_input=ModelInput.from_ints([1, 2, 3]),
            loss_fn_inputs={"target_tokens": [2, 3, 4]},
        ),
        Datum(
            model_input=ModelInput.from_ints([5, 6]),
            loss_fn_inputs={"target_tokens": [6, 7], "weights": [1.0, 1.0]},
        ),
    ]


def squared_loss(batch: list[Datum], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
    """C = Σ (c·logprob)², so dC/dlogprob = 2·c²·logprob."""
    assert len(batch) == len(logprobs) == 2
    loss = sum(((torch.tensor(c) * lp) ** 2).sum() for c, lp in zip(COEF, logprobs, strict=True))
    return loss, {"custom:mean": loss}  # a tensor metric is fine: the SDK detaches it


def expected_weights() -> list[list[float]]:
    targets = [[2, 3, 4], [6, 7]]
    return [
        [-2 * c * c * logprob_of(t) for c, t in zip(cs, ts, strict=True)]
        for cs, ts in zip(COEF, targets, strict=True)
    ]


def test_custom_loss_sends_negative_gradients(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    result = client.forward_backward_custom(data(), squared_loss).result(timeout=10)

    model = server.models[client.model_id]
    assert model.executed == [(1, "forward"), (2, "forward_backward")]
    forward_body = server.calls("forward")[0]["forward_input"]
    assert forward_body["loss_fn"] == "cross_entropy"
    assert forward_body["data"][0]["loss_fn_inputs"]["weights"]["data"] == [0.0, 0.0, 0.0]
    assert server.calls("forward_backward")[0]["forward_backward_input"]["loss_fn"] == (
        "cross_entropy"
    )
    for got, want in zip(model.last_weights, expected_weights(), strict=True):
        assert got == pytest.approx(want, rel=1e-5)
    assert "custom:mean" in result.metrics and "loss:sum" in result.metrics
    assert len(result.loss_fn_outputs) == 2


def test_custom_loss_async(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)

    async def main() -> dict[str, float]:
        future = await client.forward_backward_custom_async(data(), squared_loss)
        return (await future).metrics

    metrics = asyncio.run(main())
    assert metrics["custom:mean"] > 0
    for got, want in zip(
        server.models[client.model_id].last_weights, expected_weights(), strict=True
    ):
        assert got == pytest.approx(want, rel=1e-5)


def test_custom_loss_input_checks() -> None:
    no_targets = Datum(model_input=ModelInput.from_ints([1]), loss_fn_inputs={"weights": [1.0]})
    with pytest.raises(ValueError, match="target_tokens"):
        forward_data([no_targets])
    extra = Datum(
        model_input=ModelInput.from_ints([1]),
        loss_fn_inputs={"target_tokens": [2], "advantages": [1.0]},
    )
    with pytest.raises(ValueError, match="advantages"):
        forward_data([extra])
