"""A group of rank processes joined with torch.distributed at a rendezvous it is given.

The rendezvous (an ``init_method`` URL such as ``tcp://host:port`` or ``file:///path``, or a
``torch.distributed.Store``) is announced by whoever places the group; nothing here chooses an
address. gloo on CPU, NCCL on CUDA. One group per process: it is the default process group.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT = timedelta(minutes=30)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass(frozen=True)
class RankGroup:
    """This process's place in the group; rank 0 is the coordinator."""

    rank: int
    world_size: int
    device: torch.device
    backend: str

    @classmethod
    def join(
        cls,
        rendezvous: str | dist.Store,
        *,
        rank: int,
        world_size: int,
        device: str | torch.device = "cpu",
        timeout: timedelta = DEFAULT_TIMEOUT,
        join_timeout: timedelta | None = None,
    ) -> RankGroup:
        """Block until all ``world_size`` ranks have joined. ``timeout`` bounds every collective,
        the coordinator's wait for the next request included (see ``DataParallel.ping``);
        ``join_timeout`` (default: ``timeout``) bounds the wait for the other ranks to join."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside [0, {world_size})")
        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)  # object collectives on NCCL use the current device
        backend = backend_for(dev)
        joining = join_timeout or timeout
        # The default group's name prefixes its keys in the store; torch numbers it by how many
        # groups this process made before. A process joining its second group (the first one
        # ended) must use the name a fresh process does, or the ranks never find each other.
        if not dist.is_initialized():
            dist.distributed_c10d._world.group_count = 0
        common: dict[str, Any] = {"rank": rank, "world_size": world_size, "timeout": joining}
        if isinstance(rendezvous, str):
            dist.init_process_group(backend, init_method=rendezvous, **common)
        else:
            dist.init_process_group(backend, store=rendezvous, **common)
        if joining != timeout:
            dist.distributed_c10d._set_pg_timeout(timeout)
        return cls(rank, world_size, dev, backend)

    @property
    def is_coordinator(self) -> bool:
        return self.rank == 0

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    # -- collectives over Python objects (pickled; small headers, datums, results) ----------
    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def scatter(self, objs: list[Any] | None = None) -> Any:
        """Rank ``r`` gets ``objs[r]`` (given on rank 0 only)."""
        box: list[Any] = [None]
        dist.scatter_object_list(box, objs if self.rank == 0 else None, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank 0; None elsewhere."""
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def all_gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out
