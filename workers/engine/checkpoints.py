"""Adapter checkpoints on disk: PEFT-format adapter files plus, for training state, AdamW state.

A checkpoint folder holds ``adapter_model.safetensors`` and ``adapter_config.json`` (plain peft
loads them), ``loopwright.json`` (kind, base model, LoRA config, optimizer step) and, for
training state, ``optimizer.safetensors``. Loading checks everything before applying anything.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .adapters import AdapterConfig
from .errors import CheckpointError
from .optim import AdamState

TRAINING_STATE = "training_state"
SAMPLER_WEIGHTS = "sampler_weights"
FORMAT_VERSION = 1

ADAPTER_FILE = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
META_FILE = "loopwright.json"


@dataclass(frozen=True)
class CheckpointMeta:
    kind: str
    base_model: str
    lora: AdapterConfig
    optimizer_step: int | None

    @property
    def has_optimizer(self) -> bool:
        return self.optimizer_step is not None


def write(
    directory: Path,
    *,
    kind: str,
    base_model: str,
    lora: AdapterConfig,
    adapter_tensors: dict[str, torch.Tensor],
    peft_config_json: dict,
    optimizer: AdamState | None,
) -> CheckpointMeta:
    """Write a checkpoint atomically: into a sibling temp folder, then rename."""
    tmp = directory.with_name(directory.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(
        {k: v.detach().contiguous().cpu() for k, v in adapter_tensors.items()},
        tmp / ADAPTER_FILE,
        metadata={"format": "pt"},
    )
    (tmp / "adapter_config.json").write_text(json.dumps(peft_config_json, indent=2, sort_keys=True))
    meta = CheckpointMeta(kind, base_model, lora, optimizer.step if optimizer else None)
    if optimizer is not None:
        tensors = {k: v.detach().contiguous().cpu() for k, v in optimizer.tensors().items()}
        save_file(tensors, tmp / OPTIMIZER_FILE, metadata={"step": str(optimizer.step)})
    (tmp / META_FILE).write_text(
        json.dumps(
            {
                "format_version": FORMAT_VERSION,
                "kind": kind,
                "base_model": base_model,
                "lora": lora.to_dict(),
                "optimizer_step": meta.optimizer_step,
            },
            indent=2,
        )
    )
    if directory.exists():
        shutil.rmtree(directory)
    tmp.rename(directory)
    return meta


def read_meta(directory: Path) -> CheckpointMeta:
    path = directory / META_FILE
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {directory}")
    try:
        raw = json.loads(path.read_text())
        return CheckpointMeta(
            kind=raw["kind"],
            base_model=raw["base_model"],
            lora=AdapterConfig(**raw["lora"]),
            optimizer_step=raw.get("optimizer_step"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint metadata at {directory} is unreadable: {exc}") from exc


def read_adapter(directory: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(directory / ADAPTER_FILE)
    except Exception as exc:  # OSError, or safetensors' own error on a truncated/corrupt file
        raise CheckpointError(f"adapter weights at {directory} are unreadable: {exc}") from exc


def read_optimizer(directory: Path, meta: CheckpointMeta) -> AdamState:
    if not meta.has_optimizer:
        raise CheckpointError(
            f"{directory} holds {meta.kind.replace('_', ' ')} without optimizer state; "
            "sampler weights cannot resume training with optimizer (save with save_state)"
        )
    try:
        tensors = load_file(directory / OPTIMIZER_FILE)
    except Exception as exc:
        raise CheckpointError(f"optimizer state at {directory} is unreadable: {exc}") from exc
    return AdamState.from_tensors(int(meta.optimizer_step or 0), tensors)
