"""Snapshots of one adapter's whole training state (weights, AdamW state, pending gradients).

A snapshot is captured in memory in one short step (copies on the CPU), written to a folder
later, and restored bit-exactly: the folder is a training-state checkpoint (``checkpoints``)
plus ``gradients.safetensors`` when gradients were pending, so a restored adapter continues
exactly where the captured one was, even between ``forward_backward`` and ``optim_step``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from . import checkpoints
from .adapters import AdapterConfig
from .errors import CheckpointError
from .optim import AdamState

GRADIENTS_FILE = "gradients.safetensors"


@dataclass(frozen=True)
class Snapshot:
    """An adapter's training state, copied to the CPU."""

    base_model: str
    lora: AdapterConfig
    adapter: dict[str, torch.Tensor]
    optimizer: AdamState
    gradients: dict[str, torch.Tensor]
    peft_config_json: dict

    @property
    def nbytes(self) -> int:
        tensors = [*self.adapter.values(), *self.optimizer.tensors().values()]
        return sum(t.numel() * t.element_size() for t in [*tensors, *self.gradients.values()])


def copied(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()}


def write(snapshot: Snapshot, directory: Path) -> checkpoints.CheckpointMeta:
    """Write ``snapshot`` as a training-state checkpoint folder (plus its pending gradients)."""
    meta = checkpoints.write(
        directory,
        kind=checkpoints.TRAINING_STATE,
        base_model=snapshot.base_model,
        lora=snapshot.lora,
        adapter_tensors=snapshot.adapter,
        peft_config_json=snapshot.peft_config_json,
        optimizer=snapshot.optimizer,
    )
    if snapshot.gradients:
        save_file(snapshot.gradients, directory / GRADIENTS_FILE, metadata={"format": "pt"})
    return meta


def read_gradients(directory: Path) -> dict[str, torch.Tensor]:
    """The pending gradients saved with a snapshot (none: the snapshot had none)."""
    path = directory / GRADIENTS_FILE
    if not path.is_file():
        return {}
    try:
        return load_file(path)
    except Exception as exc:  # OSError, or safetensors' own error on a damaged file
        raise CheckpointError(f"pending gradients at {directory} are unreadable: {exc}") from exc
