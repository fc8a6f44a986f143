"""Bad input raises InvalidInput naming the field, and leaves the session exactly as it was.

The wire types refuse most of these before a request is taken; the engine checks again what
reaches it (a payload stored earlier, another client of the engine), so the inputs here are
built without the wire types' validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput, TensorData
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import InvalidInput


def tensor(values) -> TensorData:
    """A dense TensorData of ``values``, unchecked (NaN, infinity and all)."""
    values = list(values)
    dtype = "int64" if all(isinstance(v, int) for v in values) else "float32"
    return TensorData.model_construct(
        data=values, dtype=dtype, shape=None, sparse_crow_indices=None, sparse_col_indices=None
    )


def datum(tokens, **inputs) -> Datum:
    inputs.setdefault("target_tokens", list(tokens))
    return Datum.model_construct(
        model_input=ModelInput.from_ints(list(tokens)),
        loss_fn_inputs={name: tensor(values) for name, values in inputs.items()},
    )


GOOD = datum([1, 2, 3, 4])


def rl(tokens, logprobs=None, advantages=None) -> Datum:
    n = len(tokens)
    return datum(
        tokens,
        logprobs=logprobs if logprobs is not None else [-1.0] * n,
        advantages=advantages if advantages is not None else [1.0] * n,
    )


CASES = [
    ("cross_entropy", None, [GOOD, datum([1, 2, 300])], "data[1].model_input"),
    (
        "cross_entropy",
        None,
        [datum([1, 2], target_tokens=[1, -4])],
        "data[0].loss_fn_inputs.target_tokens",
    ),
    (
        "cross_entropy",
        None,
        [datum([1, 2, 3], weights=[1.0, 1.0])],
        "data[0].loss_fn_inputs.weights",
    ),
    (
        "cross_entropy",
        None,
        [datum([1, 2, 3], weights=[1.0, math.nan, 1.0])],
        "data[0].loss_fn_inputs.weights",
    ),
    (
        "cross_entropy",
        None,
        [datum([1, 2, 3], mask=[1.0, 1.0, 1.0])],
        "data[0].loss_fn_inputs.mask",
    ),
    ("cross_entropy", None, [datum([1] * 1025)], "data[0].model_input"),
    ("cross_entropy", None, [], "data"),
    ("cross_entropy", {"beta": 0.1}, [GOOD], "loss_fn_config.beta"),
    ("importance_sampling", None, [GOOD], "data[0].loss_fn_inputs.logprobs"),
    (
        "importance_sampling",
        None,
        [rl([1, 2], advantages=[math.inf, 0.0])],
        "data[0].loss_fn_inputs.advantages",
    ),
    ("ppo", None, [rl([1, 2], logprobs=[-1.0, -math.inf])], "data[0].loss_fn_inputs.logprobs"),
    (
        "ppo",
        {"clip_low_threshold": 1.5, "clip_high_threshold": 1.2},
        [rl([1, 2])],
        "loss_fn_config.clip_low_threshold",
    ),
    ("ppo", {"epsilon": 0.2}, [rl([1, 2])], "loss_fn_config.epsilon"),
    ("ppo", {"clip_low_threshold": "0.8"}, [rl([1, 2])], "loss_fn_config.clip_low_threshold"),
    ("dro", None, [rl([1, 2])], "loss_fn_config.beta"),
    (
        "importance_sampling",
        None,
        [rl([1, 2], logprobs=[-1.0, -500.0])],
        "data[0]",
    ),  # exp overflows
]


def session(host):
    host.create_adapter("m", AdapterConfig(rank=4, seed=1))
    host.forward_backward("m", ForwardBackwardInput(data=[GOOD], loss_fn="cross_entropy"))
    params = host.pool.parameters("m")
    return {k: p.detach().clone() for k, p in params.items()}, {
        k: p.grad.clone() for k, p in params.items()
    }


@pytest.mark.parametrize(("loss_fn", "config", "data", "field"), CASES)
def test_bad_forward_backward_names_the_field_and_changes_nothing(
    host, loss_fn, config, data, field
) -> None:
    weights, grads = session(host)
    fwd = ForwardBackwardInput.model_construct(data=data, loss_fn=loss_fn, loss_fn_config=config)
    with pytest.raises(InvalidInput) as err:
        host.forward_backward("m", fwd)
    assert err.value.field == field
    assert err.value.category == "user"
    for k, p in host.pool.parameters("m").items():
        assert torch.equal(p.detach(), weights[k]) and torch.equal(p.grad, grads[k]), k


def test_unknown_loss_is_rejected_not_defaulted(host) -> None:
    session(host)
    fwd = ForwardBackwardInput.model_construct(data=[GOOD], loss_fn="mse", loss_fn_config=None)
    with pytest.raises(InvalidInput, match="unknown loss 'mse'") as err:
        host.forward_backward("m", fwd)
    assert err.value.field == "loss_fn"


@pytest.mark.parametrize(("name", "reason"), [("custom", "forward_backward_custom")])
def test_unsupported_tinker_losses_are_refused_by_name(host, name, reason) -> None:
    session(host)
    fwd = ForwardBackwardInput.model_construct(data=[GOOD], loss_fn=name, loss_fn_config=None)
    with pytest.raises(InvalidInput, match=f"{name} is not supported.*{reason}") as err:
        host.forward_backward("m", fwd)
    assert err.value.field == "loss_fn"


def test_a_late_failure_rolls_back_gradients_of_earlier_micro_batches(make_host) -> None:
    host = make_host(max_batch_tokens=8)  # one datum per micro-batch
    _weights, grads = session(host)
    data = [rl([1, 2, 3]), rl([4, 5, 6]), rl([7, 8, 9], logprobs=[-1.0, -1.0, -900.0])]
    with pytest.raises(InvalidInput):
        host.forward_backward("m", ForwardBackwardInput(data=data, loss_fn="importance_sampling"))
    for k, p in host.pool.parameters("m").items():
        assert torch.equal(p.grad, grads[k]), k


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"learning_rate": -1.0}, "adam_params.learning_rate"),
        ({"learning_rate": math.nan}, "adam_params.learning_rate"),
        ({"beta1": 1.0}, "adam_params.beta1"),
        ({"beta2": -0.1}, "adam_params.beta2"),
        ({"grad_clip_norm": -1.0}, "adam_params.grad_clip_norm"),
        ({"weight_decay": math.inf}, "adam_params.weight_decay"),
    ],
)
def test_bad_adam_params_change_nothing(host, params, field) -> None:
    weights, grads = session(host)
    with pytest.raises(InvalidInput) as err:
        host.optim_step("m", AdamParams.model_construct(**{**AdamParams().model_dump(), **params}))
    assert err.value.field == field
    assert host.pool.optimizer("m").step == 0
    for k, p in host.pool.parameters("m").items():
        assert torch.equal(p.detach(), weights[k]) and torch.equal(p.grad, grads[k]), k


def test_non_finite_values_in_tensor_data_are_rejected(host) -> None:
    session(host)
    d = datum([1, 2, 3], target_tokens=[1, 2, 3], weights=np.array([1.0, np.inf, 0.0]).tolist())
    with pytest.raises(InvalidInput, match="non-finite") as err:
        host.forward("m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
    assert err.value.field == "data[0].loss_fn_inputs.weights"
