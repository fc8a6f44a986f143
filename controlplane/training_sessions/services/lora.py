"""What a LoRA adapter may be, checked before a model is made: the API's create_model and the
dashboard's new-session form both call ``lora_checked``, so a model a worker would refuse (rank 0,
alpha below zero) is a 400 at once rather than a session that fails later."""

from __future__ import annotations

import math

from controlplane.errors import DomainError

OPTIMIZERS = ("adamw", "dimuon")
# The engine's limit (workers.engine.host.HostConfig.max_lora_rank): a worker refuses larger.
MAX_LORA_RANK = 128
MAX_SEED = 2**63 - 1
DEFAULT_RANK = 32


def _number(value: object, field: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DomainError(f"{field}: {what}", field=field)
    return float(value)


def lora_checked(lora: dict) -> dict:
    """``lora`` (rank, alpha, seed, train_attn, train_mlp, train_unembed) as a worker will take
    it, or a 400 naming the first field that no worker would accept."""
    rank = lora.get("rank", DEFAULT_RANK)
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise DomainError("lora_config.rank: a whole number", field="lora_config.rank")
    if not 1 <= rank <= MAX_LORA_RANK:
        raise DomainError(
            f"lora_config.rank: must be between 1 and {MAX_LORA_RANK}, got {rank}",
            field="lora_config.rank",
        )
    alpha = lora.get("alpha")
    if alpha is not None:
        number = _number(alpha, "lora_config.alpha", "a number")
        if not math.isfinite(number) or number <= 0:
            raise DomainError(
                f"lora_config.alpha: must be greater than 0, got {alpha}",
                field="lora_config.alpha",
            )
    seed = lora.get("seed")
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    ):
        raise DomainError(
            f"lora_config.seed: a whole number from 0 to {MAX_SEED}", field="lora_config.seed"
        )
    if not any(lora.get(name, True) for name in ("train_attn", "train_mlp", "train_unembed")):
        raise DomainError(
            "lora_config: train_attn, train_mlp and train_unembed are all off: the adapter "
            "would adapt nothing",
            field="lora_config",
        )
    return lora


def optimizer_of(lora: dict) -> str:
    """The optimizer family a model was made with, kept beside its LoRA config (as the engine's
    ``AdapterConfig`` keeps it); absent means AdamW."""
    return str(lora.get("optimizer") or "adamw")


def with_optimizer(lora: dict, family: str) -> dict:
    """``lora`` recording ``family``. AdamW is not written: a config made before families
    existed, and every AdamW request a retry must repeat, stay exactly as they were."""
    out = {k: v for k, v in lora.items() if k != "optimizer"}
    if family != "adamw":
        out["optimizer"] = family
    return out
