"""Batches over 1024 datums go out as chunks, each with its own seq_id, and come back merged."""

from __future__ import annotations

import numpy as np
import pytest
from fake_server import BASE_MODEL, FakeServer, logprob_of

from loopwright import ServiceClient
from loopwright._chunking import merge_metrics, merge_outputs, split_chunks
from loopwright.types import AdamParams, Datum, ForwardBackwardOutput, ModelInput, TensorData


def datum(i: int, length: int = 3) -> Datum:
    tokens = [(i + j) % 97 for j in range(length + 1)]
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * length},
    )


def test_a_big_batch_is_chunked_and_merged(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    data = [datum(i, length=1 + i % 4) for i in range(2500)]
    fwd_bwd = client.forward_backward(data, "cross_entropy")
    optim = client.optim_step(AdamParams())
    result = fwd_bwd.result(timeout=30)
    optim.result(timeout=30)

    sizes = [len(b["forward_backward_input"]["data"]) for b in server.calls("forward_backward")]
    assert sorted(sizes) == [452, 1024, 1024]
    chunk_seq_ids = sorted(b["seq_id"] for b in server.calls("forward_backward"))
    assert chunk_seq_ids == [1, 2, 3]
    assert server.calls("optim_step")[0]["seq_id"] == 4
    assert [s for s, _ in server.models[client.model_id].executed] == [1, 2, 3, 4]

    # outputs in datum order
    assert len(result.loss_fn_outputs) == 2500
    logprobs = [[logprob_of(t) for t in d.loss_fn_inputs["target_tokens"].tolist()] for d in data]
    for out, expected in zip(result.loss_fn_outputs, logprobs, strict=True):
        assert out["logprobs"].tolist() == pytest.approx(expected)
    # metrics merged by reduction: sums add, means weight by datums, min and max fold
    flat = [p for lp in logprobs for p in lp]
    assert result.metrics["loss:sum"] == pytest.approx(-sum(flat))
    assert result.metrics["datum_logprob:mean"] == pytest.approx(
        float(np.mean([np.mean(lp) for lp in logprobs]))
    )
    assert result.metrics["logprob:min"] == pytest.approx(min(flat))
    assert result.metrics["logprob:max"] == pytest.approx(max(flat))


def test_forward_is_chunked_too(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    result = client.forward([datum(i) for i in range(1025)]).result(timeout=30)
    assert len(result.loss_fn_outputs) == 1025
    assert sorted(b["seq_id"] for b in server.calls("forward")) == [1, 2]


def test_an_empty_batch_is_refused_before_taking_a_seq_id(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    with pytest.raises(ValueError, match="at least one datum"):
        client.forward_backward([], "cross_entropy")
    with pytest.raises(ValueError):
        client.forward_backward([datum(0)], "not_a_loss")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.optim_step({"learning_rate": "fast"})  # type: ignore[arg-type]
    client.optim_step(AdamParams()).result(timeout=10)
    assert server.calls("optim_step")[0]["seq_id"] == 1


def test_split_respects_count_and_size() -> None:
    data = [datum(i) for i in range(10)]
    assert [len(c) for c in split_chunks(data, max_datums=4)] == [4, 4, 2]
    assert [len(c) for c in split_chunks(data, max_bytes=1)] == [1] * 10  # one datum always fits
    assert split_chunks([]) == []


def test_merge_metrics_by_reduction() -> None:
    merged = merge_metrics(
        [
            {"loss:sum": 1.0, "acc:mean": 1.0, "lo:min": 3.0, "hi:max": 3.0, "odd:unique": 5.0},
            {"loss:sum": 2.0, "acc:mean": 0.0, "lo:min": 1.0, "hi:max": 9.0, "odd:unique": 6.0},
        ],
        weights=[3, 1],
    )
    assert merged == {
        "loss:sum": 3.0,
        "acc:mean": 0.75,
        "lo:min": 1.0,
        "hi:max": 9.0,
        "odd:unique": 5.0,
    }
    assert merge_metrics([{"a:mean": 2.0}, {"b:sum": 1.0}], [1, 1]) == {"a:mean": 2.0, "b:sum": 1.0}


def test_merge_outputs_keeps_order() -> None:
    def output(values: list[float]) -> ForwardBackwardOutput:
        return ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=[{"logprobs": TensorData(data=[v], dtype="float32")} for v in values],
            metrics={"loss:sum": sum(values)},
        )

    merged = merge_outputs([output([1.0, 2.0]), output([3.0])])
    assert [o["logprobs"].tolist() for o in merged.loss_fn_outputs] == [[1.0], [2.0], [3.0]]
    assert merged.metrics == {"loss:sum": 6.0}
    assert merge_outputs([]).loss_fn_outputs == []
