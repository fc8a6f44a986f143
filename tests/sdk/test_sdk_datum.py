"""Datum: coercion of numpy arrays, lists and torch tensors into TensorData."""

import numpy as np
import pytest
from pydantic import ValidationError

from loopwright.types import Datum, ModelInput, TensorData

PROMPT = ModelInput.from_ints([1, 2, 3])


def test_lists_take_the_dtype_of_their_name() -> None:
    datum = Datum(
        model_input=PROMPT,
        loss_fn_inputs={
            "target_tokens": [2, 3, 4],
            "weights": [0, 1, 1],
            "advantages": [0.5, -1.0, 2.0],
            "logprobs": [-1, -2, -3],
        },
    )
    inputs = datum.loss_fn_inputs
    assert {k: v.dtype for k, v in inputs.items()} == {
        "target_tokens": "int64",
        "weights": "float32",
        "advantages": "float32",
        "logprobs": "float32",
    }
    assert inputs["target_tokens"].data == [2, 3, 4]
    assert inputs["weights"].data == [0.0, 1.0, 1.0]
    assert inputs["target_tokens"].shape == [3]


def test_numpy_arrays_are_cast_by_name() -> None:
    datum = Datum(
        model_input=PROMPT,
        loss_fn_inputs={
            "target_tokens": np.array([2.0, 3.0, 4.0]),
            "weights": np.ones(3, dtype=np.int32),
            "mask": np.array([1, 0, 1], dtype=np.int8),
        },
    )
    inputs = datum.loss_fn_inputs
    assert inputs["target_tokens"].dtype == "int64"
    assert inputs["target_tokens"].data == [2, 3, 4]
    assert inputs["weights"].dtype == "float32"
    assert inputs["mask"].dtype == "int64"  # unknown names keep their inferred dtype


def test_torch_tensors_are_converted() -> None:
    torch = pytest.importorskip("torch")
    datum = Datum(
        model_input=PROMPT,
        loss_fn_inputs={
            "target_tokens": torch.tensor([2, 3, 4], dtype=torch.int32),
            "weights": torch.ones(3, dtype=torch.bfloat16, requires_grad=True),
        },
    )
    assert datum.loss_fn_inputs["target_tokens"].dtype == "int64"
    assert datum.loss_fn_inputs["weights"].data == [1.0, 1.0, 1.0]
    assert datum.loss_fn_inputs["weights"].dtype == "float32"


def test_two_dimensional_lists_keep_their_shape() -> None:
    datum = Datum(model_input=PROMPT, loss_fn_inputs={"weights": [[1, 0], [0, 1]]})
    assert datum.loss_fn_inputs["weights"].shape == [2, 2]
    assert datum.loss_fn_inputs["weights"].tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_tensor_data_and_json_pass_through() -> None:
    td = TensorData(data=[1, 2, 3], dtype="int64")
    datum = Datum.model_validate(
        {
            "model_input": {"chunks": [{"tokens": [1, 2, 3]}]},
            "loss_fn_inputs": {
                "target_tokens": td,
                "weights": {"data": [1, 1, 1], "dtype": "int64"},
            },
        }
    )
    assert datum.loss_fn_inputs["target_tokens"] is td
    # a TensorData given on the wire keeps its declared dtype
    assert datum.loss_fn_inputs["weights"].dtype == "int64"
    assert Datum.model_validate_json(datum.model_dump_json()) == datum


@pytest.mark.parametrize("bad", [[[1, 2], [3]], ["a", "b"], [None]])
def test_non_numeric_or_ragged_lists_rejected(bad: list[object]) -> None:
    with pytest.raises(ValidationError):
        Datum(model_input=PROMPT, loss_fn_inputs={"weights": bad})
