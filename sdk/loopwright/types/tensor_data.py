"""TensorData: a flat list of numbers with a dtype and shape, optionally sparse (CSR).

Converts to and from numpy; torch is imported only inside the torch helpers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from ._base import RequestModel
from .limits import INT64_MAX, INT64_MIN, Int64, NonNegativeInt32

if TYPE_CHECKING:
    import torch

__all__ = ["TensorData", "TensorDtype", "dtype_for_numpy"]

TensorDtype = Literal["int64", "float32"]

_NUMPY_DTYPES: dict[str, type[np.generic]] = {"int64": np.int64, "float32": np.float32}


def dtype_for_numpy(dtype: np.dtype[Any]) -> TensorDtype:
    """The wire dtype for a numpy dtype: floats travel as float32, integers and bools as int64."""
    if dtype.kind == "f":
        return "float32"
    if dtype.kind in "iub":
        return "int64"
    raise ValueError(f"unsupported numpy dtype for TensorData: {dtype}")


class TensorData(RequestModel):
    """A tensor on the wire: values flattened in row-major order, plus dtype and shape."""

    data: list[Int64] | list[float]
    """Flattened values (row-major); for a sparse tensor, only the non-zero values. Finite;
    int64 data are integers within int64."""

    dtype: TensorDtype
    """Element type: "int64" or "float32"."""

    shape: Annotated[list[NonNegativeInt32], Field(max_length=8)] | None = None
    """Dense shape, at most 8 dimensions; None means one dimension of length len(data).
    Required when sparse."""

    sparse_crow_indices: list[Int64] | None = None
    """CSR row pointers (length rows + 1); when set, the tensor is a sparse 2-D matrix."""

    sparse_col_indices: list[Int64] | None = None
    """CSR column index of each value in data; set together with sparse_crow_indices."""

    @model_validator(mode="after")
    def _check_layout(self) -> TensorData:
        if self.dtype == "int64" and self.data and isinstance(self.data[0], float):
            self._check_integral()
        if self.is_sparse:
            self._check_csr()
        elif self.shape is not None and math.prod(self.shape) != len(self.data):
            raise ValueError(
                f"data has {len(self.data)} values but shape {self.shape} "
                f"needs {math.prod(self.shape)}"
            )
        return self

    def _check_integral(self) -> None:
        """int64 data given as floats (1.0) must be whole numbers within int64."""
        values = np.asarray(self.data, dtype=np.float64)
        whole = np.isfinite(values) & (values == np.floor(values))
        inside = (values >= INT64_MIN) & (values < 2.0**63)
        if not bool(np.all(whole & inside)):
            raise ValueError(f"int64 data must be whole numbers within int64 (up to {INT64_MAX})")

    def _check_csr(self) -> None:
        crow, col = self.sparse_crow_indices, self.sparse_col_indices
        if crow is None or col is None:
            raise ValueError("sparse_crow_indices and sparse_col_indices must be set together")
        if self.shape is None or len(self.shape) != 2:
            raise ValueError(f"a sparse tensor needs a 2-D shape, got {self.shape}")
        rows, cols = self.shape
        if len(crow) != rows + 1 or crow[0] != 0 or crow[-1] != len(self.data):
            raise ValueError("sparse_crow_indices must be rows + 1 long, from 0 to len(data)")
        if len(col) != len(self.data):
            raise ValueError("sparse_col_indices must have one entry per value in data")
        if np.any(np.diff(crow) < 0):
            raise ValueError("sparse_crow_indices must not decrease")
        if col and (min(col) < 0 or max(col) >= cols):
            raise ValueError(f"sparse_col_indices out of range for {cols} columns")

    @property
    def is_sparse(self) -> bool:
        """Whether the values are stored in CSR form."""
        return self.sparse_crow_indices is not None or self.sparse_col_indices is not None

    @classmethod
    def from_numpy(cls, array: npt.NDArray[Any]) -> TensorData:
        """A dense TensorData holding a numpy array's values and shape."""
        dtype = dtype_for_numpy(array.dtype)
        if dtype == "int64":
            array = array.astype(np.int64, copy=False)
        return cls(data=array.ravel().tolist(), dtype=dtype, shape=list(array.shape))

    @classmethod
    def from_torch(cls, tensor: torch.Tensor) -> TensorData:
        """A dense TensorData holding a torch tensor's values (any float becomes float32)."""
        cpu = tensor.detach().cpu()
        cpu = cpu.float() if cpu.is_floating_point() else cpu.long()
        return cls.from_numpy(cpu.numpy())

    def to_numpy(self) -> npt.NDArray[Any]:
        """The tensor as a dense numpy array of its dtype (a sparse tensor is expanded)."""
        np_dtype = _NUMPY_DTYPES[self.dtype]
        values = np.asarray(self.data, dtype=np_dtype)
        if not self.is_sparse:
            return values.reshape(self.shape) if self.shape is not None else values
        assert self.shape is not None and self.sparse_crow_indices is not None  # noqa: S101 — an invariant of this code, not a check of input
        dense = np.zeros(self.shape, dtype=np_dtype)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.sparse_crow_indices))
        dense[rows, np.asarray(self.sparse_col_indices, dtype=np.int64)] = values
        return dense

    def to_torch(self) -> torch.Tensor:
        """The tensor as a dense torch tensor."""
        import torch

        return torch.from_numpy(self.to_numpy())

    def tolist(self) -> list[Any]:
        """The tensor as nested Python lists, shaped like the dense tensor."""
        result: list[Any] = self.to_numpy().tolist()
        return result
