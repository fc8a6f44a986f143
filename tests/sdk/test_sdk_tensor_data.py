"""TensorData: validation, numpy/torch conversion and sparse CSR decoding."""

import numpy as np
import pytest
from pydantic import ValidationError

from loopwright.types import TensorData


def test_dense_json_round_trip() -> None:
    td = TensorData(data=[1, 2, 3, 4, 5, 6], dtype="int64", shape=[2, 3])
    again = TensorData.model_validate_json(td.model_dump_json())
    assert again == td
    assert again.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_shape_defaults_to_one_dimension() -> None:
    arr = TensorData(data=[0.5, 1.5], dtype="float32").to_numpy()
    assert arr.dtype == np.float32
    assert arr.shape == (2,)


def test_int64_values_sent_as_floats_decode_as_ints() -> None:
    td = TensorData.model_validate({"data": [1.0, 2.0], "dtype": "int64"})
    assert td.to_numpy().dtype == np.int64
    assert td.tolist() == [1, 2]


def test_length_must_match_shape() -> None:
    with pytest.raises(ValidationError, match="needs 6"):
        TensorData(data=[1, 2, 3], dtype="int64", shape=[2, 3])


def test_negative_dimension_rejected() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        TensorData(data=[], dtype="int64", shape=[-1])


def test_int64_data_are_whole_numbers_within_int64() -> None:
    assert TensorData(data=[1.0, 2.0], dtype="int64").to_numpy().tolist() == [1, 2]
    for data in ([1.5], [2**70], [float("inf")]):
        with pytest.raises(ValidationError):
            TensorData(data=data, dtype="int64")
    with pytest.raises(ValidationError):
        TensorData(data=[float("nan")], dtype="float32")


def test_unknown_dtype_and_extra_field_rejected() -> None:
    with pytest.raises(ValidationError):
        TensorData.model_validate({"data": [1], "dtype": "float64"})
    with pytest.raises(ValidationError):
        TensorData.model_validate({"data": [1], "dtype": "int64", "device": "cuda"})


def test_from_numpy_keeps_shape_and_maps_dtypes() -> None:
    ints = TensorData.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert (ints.dtype, ints.shape, ints.data) == ("int64", [2, 3], [0, 1, 2, 3, 4, 5])
    floats = TensorData.from_numpy(np.array([0.25, 0.5], dtype=np.float64))
    assert floats.dtype == "float32"
    assert floats.to_numpy().dtype == np.float32
    bools = TensorData.from_numpy(np.array([True, False]))
    assert (bools.dtype, bools.data) == ("int64", [1, 0])
    with pytest.raises(ValueError, match="unsupported"):
        TensorData.from_numpy(np.array(["a"]))


def test_sparse_csr_decodes_to_dense() -> None:
    # [[0, 5, 0, 0],
    #  [0, 0, 0, 0],
    #  [7, 0, 0, 9]]
    td = TensorData.model_validate_json(
        '{"data": [5, 7, 9], "dtype": "int64", "shape": [3, 4],'
        ' "sparse_crow_indices": [0, 1, 1, 3], "sparse_col_indices": [1, 0, 3]}'
    )
    assert td.is_sparse
    dense = td.to_numpy()
    assert dense.dtype == np.int64
    assert dense.tolist() == [[0, 5, 0, 0], [0, 0, 0, 0], [7, 0, 0, 9]]
    assert td.tolist() == dense.tolist()


def test_sparse_all_zero_matrix() -> None:
    td = TensorData(
        data=[], dtype="float32", shape=[2, 2], sparse_crow_indices=[0, 0, 0], sparse_col_indices=[]
    )
    assert td.to_numpy().tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sparse_crow_indices": [0, 1, 1, 3]}, "set together"),
        ({"sparse_crow_indices": [0, 1, 3], "sparse_col_indices": [1, 0, 3]}, "rows \\+ 1"),
        ({"sparse_crow_indices": [0, 2, 1, 3], "sparse_col_indices": [1, 0, 3]}, "decrease"),
        ({"sparse_crow_indices": [0, 1, 1, 3], "sparse_col_indices": [1, 0, 4]}, "out of range"),
        ({"sparse_crow_indices": [0, 1, 1, 3], "sparse_col_indices": [1, 0]}, "one entry"),
    ],
)
def test_malformed_sparse_rejected(fields: dict[str, list[int]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TensorData.model_validate({"data": [5, 7, 9], "dtype": "int64", "shape": [3, 4], **fields})


def test_sparse_needs_two_dimensional_shape() -> None:
    with pytest.raises(ValidationError, match="2-D shape"):
        TensorData(data=[1], dtype="int64", sparse_crow_indices=[0, 1], sparse_col_indices=[0])


def test_torch_round_trip() -> None:
    torch = pytest.importorskip("torch")
    td = TensorData.from_torch(torch.tensor([[1.5, 2.5]], dtype=torch.bfloat16))
    assert (td.dtype, td.shape, td.data) == ("float32", [1, 2], [1.5, 2.5])
    back = td.to_torch()
    assert back.dtype == torch.float32
    assert back.tolist() == [[1.5, 2.5]]
    assert TensorData.from_torch(torch.tensor([3, 4], dtype=torch.int32)).dtype == "int64"
