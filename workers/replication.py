"""Which models train on a replica group (data-parallel), asked of the control plane once per
model; and what a worker drops when its group ends: those models' state on its host, which no
longer counts (another rank may have gone mid-operation), so they come back from their
recovery points."""

from __future__ import annotations

from controlplane import worker_port as port

from .engine.host import ModelHost
from .snapshots import Snapshots

MAX_REMEMBERED = 100_000  # models whose answer is kept; the cache starts over past it


class Replicas:
    def __init__(self, shard_ranks: int) -> None:
        """``shard_ranks`` > 1: the worker shards its base, so every model trains on its group."""
        self.shard_ranks = shard_ranks
        self._replicas: dict[str, int] = {}

    def replicated(self, model_id: str) -> bool:
        """Whether ``model_id`` trains on a replica group (asked once per model: it never
        changes). On a worker that shards its base, every model does."""
        if self.shard_ranks > 1:
            return True
        replicas = self._replicas.get(model_id)
        if replicas is None:
            if len(self._replicas) > MAX_REMEMBERED:
                self._replicas.clear()
            replicas = self._replicas[model_id] = port.model_replicas(model_id)
        return replicas > 1

    def drop(self, host: ModelHost, snapshots: Snapshots) -> None:
        """The group ended: its models leave ``host`` and ``snapshots``."""
        for model_id in list(host.pool.ids()):
            if self.replicated(model_id):
                snapshots.forget(model_id)
                host.remove_adapter(model_id)
