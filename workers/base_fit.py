"""Whether this worker holds its base model whole, or must shard it over a group of workers.

A worker knows its memory (the accelerator's, or ``--memory`` / ``LOOPWRIGHT_WORKER_MEMORY``:
what an operator gives it, e.g. ``80GiB``) and its base model's shape (its ``config.json``).
The arithmetic of ``engine.distributed.placement`` (docs/scaling.md) turns them into one rank's
need holding the base whole with one adapter and a pass's working memory, the pass budget that
fits (smaller passes first, down to ``MIN_PASS_TOKENS``), and the fewest workers of this size
the base must be sharded over. The worker registers its need and ranks; placement puts a base
that no live worker holds whole on a sharded group of that many workers.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import psutil
import torch

from .engine.distributed.placement import GIB, Fit, ModelShape, base_fit, rank_memory
from .engine.host import HostConfig

# What a rank keeps beside the model: the CUDA context, allocator slack and transient gradient
# buffers on an accelerator; the interpreter, torch and allocator slack on a CPU.
RESERVE = {"cpu": GIB // 2, "accelerator": 3 * GIB}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "kb": 10**3,
    "m": 2**20,
    "mib": 2**20,
    "mb": 10**6,
    "g": 2**30,
    "gib": 2**30,
    "gb": 10**9,
    "t": 2**40,
    "tib": 2**40,
    "tb": 10**12,
}


class BaseDoesNotFit(RuntimeError):
    """No number of workers of this memory holds the base: the worker does not start."""


def parse_memory(text: str) -> int:
    """Bytes from ``80GiB``, ``141 GB``, ``512MiB`` or a plain number of bytes."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = found.group(2).lower() if found else None
    if found is None or unit not in _UNITS:
        raise ValueError(
            f"LOOPWRIGHT_WORKER_MEMORY: {text!r} is not an amount of memory "
            "(e.g. 80GiB, 141GB, 512MiB or bytes)"
        )
    value = int(float(found.group(1)) * _UNITS[unit])
    if value < 1:
        raise ValueError(f"LOOPWRIGHT_WORKER_MEMORY: {text!r} is not more than zero")
    return value


def device_memory(device: str) -> int:
    """The memory of ``device``: the accelerator's total, or the host's RAM for ``cpu``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    return int(psutil.virtual_memory().total)


def fit_of(model_dir: Path, name: str, config: HostConfig, memory_bytes: int | None) -> Fit:
    """How the base in ``model_dir`` fits a worker of ``memory_bytes`` (None: its device's) that
    loads it as ``config`` says. A CPU worker not given its memory holds the base whole."""
    shape, kwargs = _arithmetic(model_dir, name, config)
    memory = memory_bytes if memory_bytes is not None else device_memory(config.device)
    fit = base_fit(shape, memory, **kwargs)
    if memory_bytes is None and torch.device(config.device).type == "cpu":
        # The host's RAM is shared with everything else on it (and can swap), and the budget
        # is a worst case: a CPU worker shards only when it is given its memory.
        return dataclasses.replace(fit, ranks=1, pass_tokens=config.max_batch_tokens)
    return fit


def rank_need(
    model_dir: Path, name: str, config: HostConfig, ranks: int, pass_tokens: int | None = None
) -> int:
    """Bytes one rank needs with the base sharded over ``ranks`` (1: whole), with passes of
    ``pass_tokens`` (default: the host's budget)."""
    shape, kwargs = _arithmetic(model_dir, name, config)
    if pass_tokens is not None:
        kwargs["pass_tokens"] = pass_tokens
    return rank_memory(shape, ranks, **kwargs).total


def _arithmetic(model_dir: Path, name: str, config: HostConfig) -> tuple[ModelShape, dict]:
    shape = ModelShape.of_config(name, json.loads((model_dir / "config.json").read_text()))
    kind = "cpu" if torch.device(config.device).type == "cpu" else "accelerator"
    return shape, dict(
        pass_tokens=config.max_batch_tokens,
        kv_tokens=config.max_sample_tokens,
        weight_bytes=config.torch_dtype().itemsize,
        reserve=RESERVE[kind],
    )


def host_memory_refusal(fit: Fit, name: str, host_bytes: int) -> BaseDoesNotFit | None:
    """A worker that shards its base loads it whole into host memory first (each rank then
    keeps its shards): refused when the host cannot hold the whole base's weights."""
    if fit.ranks is None or fit.ranks == 1 or fit.weights_bytes <= host_bytes:
        return None
    return BaseDoesNotFit(
        f"{name} must be sharded over {fit.ranks} workers, and a worker that shards it loads "
        f"its weights whole into host memory first: {fit.weights_bytes / GIB:.2f} GiB, and this "
        f"host has {host_bytes / GIB:.2f} GiB"
    )


def refused(fit: Fit, name: str) -> BaseDoesNotFit:
    return BaseDoesNotFit(
        f"{name} does not fit workers of {fit.memory_bytes / GIB:.2f} GiB: one holding it whole "
        f"needs {fit.whole_bytes / GIB:.2f} GiB, and sharding divides only its weights, not a "
        "pass's activations or the KV cache: give the worker more memory"
    )
