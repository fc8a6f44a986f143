"""A session's adapter as peft's active one, for a plain forward of the pool's model (what peft's
own forward uses when no row plan is set): the reference the sampler's outputs are checked
against. The engine's passes never need it; they route rows to adapters themselves."""

from __future__ import annotations

from workers.engine.adapters import AdapterPool, adapter_name


def activate(pool: AdapterPool, model_id: str) -> None:
    """Load the adapter if it was evicted and make it peft's active adapter."""
    pool.load([model_id])
    pool.model.set_adapter(adapter_name(model_id))
