"""Loading this worker's engine host: whether its memory holds the base model whole or only
sharded over a replica group (``base_fit``), and how the host loads the base: as asked, then
with passes as large as its memory allows, into host memory when the base is sharded."""

from __future__ import annotations

import dataclasses

from .base_fit import device_memory, fit_of, host_memory_refusal, refused
from .engine.catalog import MaterializedModel
from .engine.distributed.placement import Fit
from .engine.host import HostConfig, ModelHost
from .settings import WorkerSettings


def fitted(settings: WorkerSettings, materialized: MaterializedModel) -> tuple[Fit, int]:
    """How the base fits this worker's memory, and the ranks it is sharded over (1: whole).
    Raises ``BaseDoesNotFit`` where no number of such workers holds it, or where the host's own
    memory cannot hold what it loads."""
    config = host_config(settings, None)
    fit = fit_of(materialized.path, settings.base_model, config, settings.memory_bytes)
    if fit.ranks is None:
        raise refused(fit, settings.base_model)
    too_big = host_memory_refusal(fit, settings.base_model, device_memory("cpu"))
    if too_big is not None:
        raise too_big
    return fit, fit.ranks


def host_config(settings: WorkerSettings, fit: Fit | None) -> HostConfig:
    """How the host loads its base: as asked (``fit`` None: before it is known), then with
    passes as large as its memory allows, into host memory when the base is sharded."""
    sharding = fit is not None and fit.ranks is not None and fit.ranks > 1
    config = HostConfig(
        device=settings.device,
        # a base sharded over the group is loaded into host memory; each rank's shards move
        # to its accelerator as the base is sharded
        load_device="cpu" if sharding and settings.device != "cpu" else None,
        dtype=settings.dtype,
        max_loaded_adapters=settings.max_loaded_adapters,
        release_slack_mb=settings.release_slack_mb,
    )
    if fit is None:
        return config
    return dataclasses.replace(config, max_batch_tokens=fit.pass_tokens)


def load_host(settings: WorkerSettings, fit: Fit) -> ModelHost:
    """The engine host with the base loaded as ``fit`` allows."""
    return ModelHost(settings.base_model, host_config(settings, fit))
