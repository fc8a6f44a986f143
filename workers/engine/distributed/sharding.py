"""A base model too big for one worker, sharded over the group with FSDP2 (``fully_shard``).

Each decoder layer and the whole model become FSDP units over a 1-D mesh of the group: a rank
keeps 1/N of every frozen base weight and all-gathers a unit's weights just before it runs
(forward, backward, each decoding step). The LoRA adapters are left out of FSDP
(``ignored_params``, and adapters created later are plain parameters): they are small, each rank
holds them whole, and ``DataParallel`` keeps them identical. Every rank must make the same
passes in the same order: ``lockstep`` sees to it.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from ..host import ModelHost
from .group import RankGroup


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The transformer blocks: the ModuleList with one entry per hidden layer."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"{type(model).__name__} has no ModuleList of {count} decoder layers")


def shard_base(host: ModelHost, group: RankGroup) -> None:
    """Shard the host's frozen base over the group (every rank calls it, with the same model).

    The host must have no training adapter yet (the placeholder aside): its base weights are
    replaced by this rank's shards in place, on the host's device. A host loaded elsewhere
    (``HostConfig.load_device="cpu"`` for a base too big for one GPU) has each layer moved to
    the GPU whole, cut, and its other pieces freed, one layer at a time.
    """
    if host.pool.ids():
        raise ValueError("shard the base before creating adapters")
    if host.device.type != group.device.type:
        raise ValueError(f"the host computes on {host.device}, the group is on {group.device}")
    mesh = init_device_mesh(group.device.type, (group.world_size,))
    lora = {p for name, p in host.pool.model.named_parameters() if "lora_" in name}
    for p in lora:  # the placeholder adapter, which FSDP leaves alone
        p.data = p.data.to(host.device)
    base = host.pool.model.get_base_model()
    for layer in decoder_layers(base):
        fully_shard(layer, mesh=mesh, ignored_params=lora)
    fully_shard(base, mesh=mesh, ignored_params=lora)
    host.ranks_in_step = True


def is_sharded(host: ModelHost) -> bool:
    return any(isinstance(p, DTensor) for p in host.pool.model.get_base_model().parameters())


def local_base_numel(host: ModelHost) -> tuple[int, int]:
    """(elements of the base this rank stores, elements of the whole base)."""
    held = total = 0
    for name, p in host.pool.model.get_base_model().named_parameters():
        if "lora_" in name:
            continue
        total += p.numel()
        held += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
    return held, total
