"""What a LoRA adapter may be, checked before a model is made: the API's create_model and the
dashboard's new-session form both call ``lora_checked``, so a model a worker would refuse (rank 0,
alpha below zero) is a 400 at once rather than a session that fails later."""

from __future__ import annotations

import math

from controlplane.errors import DomainError
from controlplane.fleet.models import BaseModel

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
    """``lora`` (rank, alpha, seed, train_attn, train_mlp, train_unembed, train_projector) as a
    worker will take it, or a 400 naming the first field that no worker would accept."""
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
    projector = lora.get("train_projector", False)
    if not isinstance(projector, bool):
        raise DomainError(
            "lora_config.train_projector: true or false", field="lora_config.train_projector"
        )
    return lora


def projector_checked(lora: dict, base_model: str) -> None:
    """``train_projector`` asks for a vision-language base model: a text model (one whose
    workers registered that it takes no images) has no projector to adapt."""
    if not lora.get("train_projector"):
        return
    per_image = (
        BaseModel.objects.filter(name=base_model).values_list("image_tokens", flat=True).first()
    )
    if per_image is None:
        raise DomainError(
            f"lora_config.train_projector: base model {base_model!r} is a text model and has "
            "no projector; it applies to vision-language base models only",
            field="lora_config.train_projector",
        )


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
