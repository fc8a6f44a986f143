"""What a training step must carry beyond its wire shape, checked when it arrives: each refusal
is a 400 naming the field (the request still takes its ``seq_id``, as every refused step does).
"""

from __future__ import annotations

from controlplane.errors import DomainError
from controlplane.training_sessions.models import Operation
from controlplane.training_sessions.services.lora import optimizer_of

from .admission import TOKEN_KINDS

BATCH_KEYS = ("forward_backward_input", "forward_input")


def loss_requirements(kind: str, body: object) -> None:
    """``stable_reinforce`` trains on what the sampler recorded: every datum must name the
    recorded sequences behind its tokens (provenance), which the service turns into the
    engine's ``logprobs`` and ``sampled_mask``. A datum without provenance is refused."""
    if kind not in TOKEN_KINDS or not isinstance(body, dict):
        return
    for key in BATCH_KEYS:
        batch = body.get(key)
        if isinstance(batch, dict) and batch.get("loss_fn") == "stable_reinforce":
            raise DomainError(
                f"{key}.data[0]: stable_reinforce trains on what sampling recorded: every datum "
                "needs provenance naming the sequences it was sampled from, recorded with "
                "record_stability_info=True (Datum.with_provenance); this datum names none",
                field=f"{key}.data[0]",
            )


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
