"""The worker's packed engine calls (``workers.executor.run_packed`` / ``run_samples``): a call
that fails as a whole, not for one request's fault, runs its requests again one by one, so only
the request at fault fails, and the others get exactly what they get alone."""

from __future__ import annotations

import pytest

from loopwright.types import ForwardBackwardInput
from workers.engine.adapters import AdapterConfig
from workers.executor import run_packed, run_samples


def _fb(tokens: list[int]) -> dict:
    datum = {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "loss_fn_inputs": {"target_tokens": {"data": [t + 1 for t in tokens], "dtype": "int64"}},
    }
    return {"forward_backward_input": {"data": [datum], "loss_fn": "cross_entropy"}}


def _sample(seed: int) -> dict:
    return {
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [3, 4, 5]}]},
        "num_samples": 2,
        "sampling_params": {"max_tokens": 4, "seed": seed, "stop": []},
    }


@pytest.fixture
def spilled(make_host):
    """Four adapters on a host that keeps three loaded: "c" is spilled to disk, and its spill
    file is then lost (loading it fails, and with it any shared call that needs it)."""
    host = make_host(max_loaded_adapters=3)
    for name in ("a", "b", "c", "d"):
        host.create_adapter(name, AdapterConfig(rank=4, seed=0))
    host.pool.load(["a", "b", "d"])  # c goes to disk
    assert "c" not in host.pool.loaded_ids()
    host.pool._spill_path("c").unlink()
    return host


def test_a_shared_training_call_that_fails_reruns_each_alone(spilled, make_host) -> None:
    items = [(_fb([1, 2, 3]), {"adapter": m}) for m in ("a", "b", "c")]
    outcomes = run_packed(spilled, "forward_backward", items)
    assert [o.ok for o in outcomes] == [True, True, False]
    assert outcomes[2].category == "server"
    assert spilled.calls["forward_backward_many"] == 4  # the shared call, then "a", "b", "c" alone
    alone = make_host()
    alone.create_adapter("a", AdapterConfig(rank=4, seed=0))
    expected = alone.forward_backward_many([("a", _model_input([1, 2, 3]))])[0]
    for outcome in outcomes[:2]:
        got = outcome.result["loss_fn_outputs"][0]["logprobs"]["data"]
        want = expected.model_dump(mode="json")["loss_fn_outputs"][0]["logprobs"]["data"]
        assert got == pytest.approx(want, abs=1e-5)


def _model_input(tokens: list[int]) -> ForwardBackwardInput:
    return ForwardBackwardInput.model_validate(_fb(tokens)["forward_backward_input"])


def test_a_shared_sampling_call_that_fails_reruns_each_alone(spilled) -> None:
    items = [(_sample(7), {"adapter": m}) for m in ("a", None, "c")]
    outcomes = run_samples(spilled, items)
    assert [o.ok for o in outcomes] == [True, True, False]
    assert outcomes[2].category == "server"
    assert spilled.calls["sample_many"] == 4
    (again,) = run_samples(spilled, [items[0]])
    assert again.result["sequences"][0]["tokens"] == outcomes[0].result["sequences"][0]["tokens"]


def test_optim_steps_fail_alone_without_a_second_try(spilled) -> None:
    items = [({"adam_params": {"learning_rate": 0.01}}, {"adapter": m}) for m in ("a", "c", "b")]
    outcomes = run_packed(spilled, "optim_step", items)
    assert [o.ok for o in outcomes] == [True, False, True]
    assert spilled.calls["optim_step_many"] == 1
