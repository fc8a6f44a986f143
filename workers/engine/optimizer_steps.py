"""One optimizer step of an adapter, by the family it was created with: AdamW (``optim``) or
Dimuon (``dimuon``). Hyperparameters of the other family are refused naming their field."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from loopwright.types import AdamParams, OptimParams, params_family

from .dimuon import DimuonHyper, dimuon_step
from .errors import InvalidInput
from .optim import AdamHyper, AdamState, adamw_step

Hyper = AdamHyper | DimuonHyper
_FIELD = {"adamw": "adam_params", "dimuon": "optimizer_params"}
_TYPE = {"adamw": "AdamParams", "dimuon": "DimuonParams"}


def hyper_for(family: str, step: OptimParams) -> Hyper:
    """``step``'s hyperparameters, checked, for a model of ``family``; the other family's are
    refused naming their field."""
    sent = params_family(step)
    if sent != family:
        raise InvalidInput(
            _FIELD[sent],
            f"this model's optimizer is {family}, chosen when it was created: send "
            f"{_TYPE[family]} as {_FIELD[family]}",
        )
    hyper_type: type[Hyper] = AdamHyper if isinstance(step, AdamParams) else DimuonHyper
    hp = hyper_type(**step.model_dump(include=set(hyper_type.__dataclass_fields__)))
    hp.validate()
    return hp


def apply(
    hp: Hyper, params: Mapping[str, torch.nn.Parameter], state: AdamState, rank: int
) -> dict[str, float]:
    """The step (``state`` updated in place, gradients cleared); its metrics."""
    if isinstance(hp, AdamHyper):
        return adamw_step(params, state, hp)
    return dimuon_step(params, state, hp, rank)
