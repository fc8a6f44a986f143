"""An in-process worker runtime on the tiny model, which tests drain explicitly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workers.engine.catalog import TINY_MODEL, TINY_VLM, ModelCatalog
from workers.engine.host import HostConfig, ModelHost

TINY = TINY_MODEL


def tiny_hosts(cache_dir: Path, spill_dir: Callable[[], Path]) -> Callable[[], ModelHost]:
    """A maker of fresh hosts of the tiny model, materialized once in ``cache_dir``; each host
    spills to a new ``spill_dir()``."""
    catalog = ModelCatalog(cache_dir=cache_dir)
    catalog.materialize(TINY)

    def make() -> ModelHost:
        return ModelHost(TINY, HostConfig(spill_dir=spill_dir()), catalog)

    return make


def vlm_runtime(catalog: ModelCatalog, spill_dir: Path, *, capacity: int = 4, name: str = "vlm0"):
    """A worker runtime named ``name`` serving the tiny LLaVA (16 image tokens per image) from
    ``catalog``, which has it materialized; as ``tiny_runtime`` otherwise."""
    host = ModelHost(TINY_VLM, HostConfig(spill_dir=spill_dir), catalog)
    return tiny_runtime(host, capacity=capacity, name=name, base_model=TINY_VLM)


def tiny_runtime(
    host: ModelHost, *, capacity: int = 4, name: str = "test0", base_model: str = TINY
):
    """A worker runtime named ``name`` on ``host`` (of ``base_model``) with room for
    ``capacity`` models, with no heartbeat and no snapshots but those a test asks for."""
    from workers.runtime import WorkerRuntime, WorkerSettings

    return WorkerRuntime(
        WorkerSettings(
            name=name,
            base_model=base_model,
            capacity=capacity,
            snapshot_every_steps=0,
            snapshot_every_seconds=0,
        ),
        host=host,
        heartbeat=False,
    )
