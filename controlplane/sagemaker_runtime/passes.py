"""A ``forward`` or ``forwardBackward`` operation as the Tinker wire's request: its datums, loss
and loss config, checked against the service model's rules and then against what this service
runs (a ``ValidationException`` naming the member and the limit).

The model's RL losses take a ``weights`` mask beside ``advantages``; the engine's take none, so
the mask is folded into the advantages (``A·w``). That is exact for ``importance_sampling`` and
``cispo`` (linear in ``A``) and, for ``ppo``, for the masks the model describes (``w ≥ 0``:
``min(r·A, clip(r)·A)·w = min(r·Aw, clip(r)·Aw)``); a negative weight is refused for ``ppo``.
"""

from __future__ import annotations

import numpy as np

from controlplane.errors import DomainError
from loopwright.types.limits import MAX_DATUMS

from .shapes import Datum, PassConfig, TensorData

# the model's loss inputs, and which of them this service's losses take
MODEL_INPUTS = ("target_tokens", "weights", "advantages", "logprobs", "ref_log_prob", "temperature")
NOT_HERE = {
    "ref_log_prob": "a reference policy's logprobs are not an input of this service's losses",
    "temperature": "per-token temperatures are not an input of this service's losses",
}
REQUIRED = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "weights", "advantages", "logprobs"),
    "ppo": ("target_tokens", "weights", "advantages", "logprobs"),
    "cispo": ("target_tokens", "weights", "advantages", "logprobs"),
}
# lossFnConfig: the model's keys and ranges; this service's losses that take them
CONFIG_RANGES = {"clip_low_threshold": (0.0, 1.0), "clip_high_threshold": (1.0, 10.0)}
CONFIGURABLE = ("ppo", "cispo")
# the model's dtypes, as the Tinker wire carries them (values are JSON numbers either way)
DTYPES = {
    "int64": "int64",
    "int32": "int64",
    "float32": "float32",
    "float16": "float32",
    "bfloat16": "float32",
}


def invalid(field: str, why: str) -> DomainError:
    return DomainError(f"{field}: {why}", field=field)


def pass_input(config: PassConfig, where: str) -> dict:
    """The Tinker ``ForwardBackwardInput`` of ``config`` (``where``: its member's path)."""
    loss = config.lossFnName
    if not config.datumList:
        raise invalid(f"{where}.datumList", "must contain at least one datum")
    if len(config.datumList) > MAX_DATUMS:
        raise invalid(
            f"{where}.datumList",
            f"at most {MAX_DATUMS} datums per operation here, got {len(config.datumList)} "
            "(the SDK splits larger batches into consecutive operations)",
        )
    data = [_datum(d, loss, f"{where}.datumList[{i}]") for i, d in enumerate(config.datumList)]
    body: dict = {"loss_fn": loss, "data": data}
    loss_config = _loss_config(config.lossFnConfig, loss, f"{where}.lossFnConfig")
    if loss_config:
        body["loss_fn_config"] = loss_config
    return body


def _datum(datum: Datum, loss: str, where: str) -> dict:
    if not datum.modelInput.chunks:
        raise invalid(f"{where}.modelInput.chunks", "must hold at least one chunk")
    inputs = datum.lossFnInputs or {}
    for key in inputs:
        if key not in MODEL_INPUTS:
            raise invalid(
                f"{where}.lossFnInputs.{key}", f"not a loss input; supported: {MODEL_INPUTS}"
            )
        if key in NOT_HERE:
            raise invalid(f"{where}.lossFnInputs.{key}", NOT_HERE[key])
    missing = [key for key in REQUIRED[loss] if key not in inputs]
    if missing:
        raise invalid(
            f"{where}.lossFnInputs.{missing[0]}",
            f"{loss} requires {', '.join(REQUIRED[loss])}; missing {', '.join(missing)}",
        )
    tensors = {k: _tensor(t, f"{where}.lossFnInputs.{k}") for k, t in inputs.items()}
    if loss != "cross_entropy":
        tensors = _weights_folded(tensors, loss, f"{where}.lossFnInputs")
    chunks = [{"type": "encoded_text", "tokens": list(c.tokens)} for c in datum.modelInput.chunks]
    return {"model_input": {"chunks": chunks}, "loss_fn_inputs": tensors}


def _tensor(tensor: TensorData, where: str) -> dict:
    dtype = DTYPES.get(tensor.dtype)
    if dtype is None:
        raise invalid(f"{where}.dtype", f"one of {', '.join(DTYPES)}, got {tensor.dtype[:32]!r}")
    data = list(tensor.data)
    if dtype == "int64" and any(isinstance(v, float) and not v.is_integer() for v in data):
        raise invalid(f"{where}.data", f"{tensor.dtype} data must be whole numbers")
    out: dict = {"data": data, "dtype": dtype}
    if tensor.shape is not None:
        if int(np.prod(tensor.shape, dtype=np.float64)) != len(data):
            raise invalid(f"{where}.shape", f"{tensor.shape} does not hold {len(data)} values")
        out["shape"] = list(tensor.shape)
    return out


def _weights_folded(tensors: dict[str, dict], loss: str, where: str) -> dict[str, dict]:
    """The inputs of an RL loss with its ``weights`` mask folded into ``advantages``."""
    weights = np.asarray(tensors["weights"]["data"], dtype=np.float64)
    advantages = np.asarray(tensors["advantages"]["data"], dtype=np.float64)
    if weights.shape != advantages.shape:
        raise invalid(
            f"{where}.weights",
            f"has {weights.size} values but advantages has {advantages.size}: both are one "
            "value per token of the datum",
        )
    if loss == "ppo" and np.any(weights < 0):
        raise invalid(f"{where}.weights", "ppo takes a mask of weights ≥ 0 here")
    folded = {k: v for k, v in tensors.items() if k != "weights"}
    folded["advantages"] = {**tensors["advantages"], "data": (advantages * weights).tolist()}
    return folded


def _loss_config(config: dict | None, loss: str, where: str) -> dict[str, float]:
    if not config:
        return {}
    out = {}
    for key, value in config.items():
        if key not in CONFIG_RANGES:
            raise invalid(
                f"{where}.{str(key)[:64]}", f"not a key; supported: {list(CONFIG_RANGES)}"
            )
        if loss not in CONFIGURABLE:
            raise invalid(f"{where}.{key}", f"{loss} takes no configuration here")
        low, high = CONFIG_RANGES[key]
        number_like = isinstance(value, int | float) and not isinstance(value, bool)
        if not number_like or not low <= value <= high:
            raise invalid(f"{where}.{key}", f"a number from {low:g} to {high:g}")
        out[key] = float(value)
    low, high = out.get("clip_low_threshold"), out.get("clip_high_threshold")
    if low is not None and high is not None and low > high:
        raise invalid(f"{where}.clip_low_threshold", "must not exceed clip_high_threshold")
    return out
