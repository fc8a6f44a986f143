"""Which optimizer a training model may be created with (``create_model``'s
``optimizer_config``): the families this service trains with, each with the fields it takes."""

from __future__ import annotations

from typing import Any

from controlplane.errors import DomainError

__all__ = ["OPTIMIZERS", "optimizer_config"]

OPTIMIZERS: dict[str, frozenset[str]] = {"adamw": frozenset()}
"""Optimizer families offered, with the fields (besides ``type``) each one's config takes."""


def optimizer_config(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The validated config, or None for the default (AdamW). An optimizer not offered is a 400
    naming it, before the model exists."""
    if config is None:
        return None
    kind = config.get("type")
    if not isinstance(kind, str):
        raise DomainError("optimizer_config.type is required", field="optimizer_config.type")
    if kind not in OPTIMIZERS:
        offered = ", ".join(sorted(OPTIMIZERS))
        raise DomainError(
            f"optimizer_config.type {kind!r} is not offered here (offered: {offered}); "
            "optim_step applies AdamW with the AdamParams of each step",
            field="optimizer_config.type",
        )
    extra = sorted(set(config) - {"type"} - OPTIMIZERS[kind])
    if extra:
        raise DomainError(
            f"optimizer_config.{extra[0]}: unknown field for {kind}",
            field=f"optimizer_config.{extra[0]}",
        )
    return None if kind == "adamw" else dict(config)
