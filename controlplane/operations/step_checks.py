"""What a training step must carry beyond its wire shape, checked when it arrives: an optim_step
sends the hyperparameters of its model's optimizer family (a 400 naming the field otherwise; the
request still takes its ``seq_id``, as every refused step does). A datum's provenance is checked
by ``training_sessions.services.provenance``."""

from __future__ import annotations

from controlplane.errors import DomainError
from controlplane.training_sessions.models import Operation
from controlplane.training_sessions.services.lora import optimizer_of

_PARAMS = {"adamw": ("adam_params", "AdamParams"), "dimuon": ("optimizer_params", "DimuonParams")}


def step_family(kind: str, payload: dict) -> str | None:
    """The optimizer family an optim_step's hyperparameters are for (None: not a step)."""
    if kind != Operation.Kind.OPTIM_STEP:
        return None
    return "dimuon" if payload.get("optimizer_params") is not None else "adamw"


def optimizer_matches(kind: str, payload: dict, lora: dict) -> None:
    """An optim_step sends the hyperparameters of the family its model was made with."""
    sent, family = step_family(kind, payload), optimizer_of(lora)
    if sent is None or sent == family:
        return
    field, expected = _PARAMS[sent][0], _PARAMS[family]
    raise DomainError(
        f"{field}: this model's optimizer is {family}, chosen when it was created; send "
        f"{expected[1]} as {expected[0]}",
        field=field,
    )
