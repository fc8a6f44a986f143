"""``ExecuteTrainingOperation``: each member of ``operationConfig`` becomes the Tinker wire's
request of the same kind for the session's model, with ``sequenceNumber`` as its ``seq_id``,
submitted through the same services, IAM actions and audit rows as the Tinker face's.

A retry (the same ``sequenceNumber`` and body, as the SDK resends with its ``clientToken``) gets
the same operation back; another body under a used ``sequenceNumber`` is a ``ConflictException``.
A request refused on arrival still takes its ``sequenceNumber``, so later ones do not wait for it.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from controlplane.api.views.training import ACTIONS
from controlplane.audit.services import audited_transaction
from controlplane.edge.callers import allow, principal_of
from controlplane.errors import DomainError
from controlplane.iam.access import decide
from controlplane.iam.resources import model_arn
from controlplane.operations import training, weights
from controlplane.training_sessions.models import Operation
from loopwright.types import (
    LoadWeightsRequest,
    SaveWeightsForSamplerRequest,
    SaveWeightsRequest,
)

from .passes import invalid, pass_input
from .sessions import TrainingSession
from .shapes import AdamParamsConfig, ExecuteTrainingOperation

KINDS = {
    "forward": Operation.Kind.FORWARD,
    "forwardBackward": Operation.Kind.FORWARD_BACKWARD,
    "optimizerStep": Operation.Kind.OPTIM_STEP,
    "saveWeights": Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER,
    "saveState": Operation.Kind.SAVE_WEIGHTS,
    "loadState": Operation.Kind.LOAD_WEIGHTS,
}
MEMBERS = {kind: member for member, kind in KINDS.items()}
# AdamW's hyperparameters a request leaves out: sagemaker-train's AdamParams defaults
ADAM_DEFAULTS = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weightDecay": 0.01}


def kind_named(raw: object) -> str:
    """The kind a raw body's ``operationConfig`` names (its first member), for a refusal."""
    config = raw.get("operationConfig") if isinstance(raw, dict) else None
    member = next(iter(config), None) if isinstance(config, dict) and config else None
    return KINDS.get(member, Operation.Kind.FORWARD_BACKWARD)


def refused(ts: TrainingSession, raw: object, exc: Exception) -> None:
    """A request refused before it was submitted still takes its ``sequenceNumber``: recorded by
    the Tinker wire's one function for refusals on arrival (``training.refused_on_arrival``)."""
    seq = raw.get("sequenceNumber") if isinstance(raw, dict) else None
    training.refused_on_arrival(
        tenant=ts.tenant,
        kind=kind_named(raw),
        body={"model_id": ts.model.id, "seq_id": seq},
        exc=exc,
    )


def training_execute(*, request, ts: TrainingSession, raw: object) -> Operation:
    """Submit the operation ``raw`` (the request's JSON body) describes."""
    try:
        body = ExecuteTrainingOperation.model_validate(raw)
        member, config = body.operationConfig.member
        kind = KINDS[member]
        where = f"operationConfig.{member}"
        head = {"model_id": ts.model.id, "seq_id": body.sequenceNumber}
        if member in ("forward", "forwardBackward"):
            key = "forward_input" if member == "forward" else "forward_backward_input"
            step = {**head, key: pass_input(config, where)}
        elif member == "optimizerStep":
            step = {**head, "adam_params": adam_params(config.adamParamsConfig, where)}
        else:
            step, submit = None, _save_or_load(ts, member, config, head)
    except (DomainError, ValidationError) as exc:
        refused(ts, raw, exc)
        raise
    if step is None:
        return _sequenced(request, ts, raw, kind, submit)
    resource = model_arn(ts.tenant, ts.model.id)
    access = decide(principal_of(request), ACTIONS[kind], resource, request=request)
    return training.submit(tenant=ts.tenant, kind=kind, body=step, access=access)


def _save_or_load(ts: TrainingSession, member: str, config, head: dict) -> Callable[[], Operation]:
    tenant = ts.tenant
    metadata = {"description": config.description} if getattr(config, "description", None) else None
    if member == "saveWeights":
        req = SaveWeightsForSamplerRequest(
            **head, merge_weights=bool(config.mergeWeights), user_metadata=metadata
        )
        return lambda: weights.save_weights_for_sampler_submit(tenant=tenant, req=req)
    if member == "saveState":
        state = SaveWeightsRequest(**head, user_metadata=metadata)
        return lambda: weights.save_weights_submit(tenant=tenant, req=state)
    load = LoadWeightsRequest(**head, path=config.modelPackageArn, optimizer=config.loadOptimizer)
    return lambda: weights.load_weights_submit(tenant=tenant, req=load)


def _sequenced(
    request, ts: TrainingSession, raw: object, kind: str, submit: Callable[[], Operation]
) -> Operation:
    """A save or load: authorized and submitted in one transaction with its audit row."""
    try:
        with audited_transaction():
            allow(request, ACTIONS[kind], model_arn(ts.tenant, ts.model.id))
            return submit()
    except (DomainError, ValidationError) as exc:
        refused(ts, raw, exc)
        raise


def adam_params(config: AdamParamsConfig, where: str) -> dict:
    """The Tinker wire's ``AdamParams`` of an ``adamParamsConfig``."""
    where = f"{where}.adamParamsConfig"
    if config.learningRate <= 0:
        raise invalid(f"{where}.learningRate", "must be greater than 0")
    if config.loraPlusLrRatio not in (None, 1.0):
        raise invalid(
            f"{where}.loraPlusLrRatio",
            "LoRA+ (a larger learning rate for the B matrices) is not offered here; "
            "leave it unset or 1",
        )
    values = {**ADAM_DEFAULTS, **config.model_dump(exclude_none=True)}
    return {
        "learning_rate": values["learningRate"],
        "beta1": values["beta1"],
        "beta2": values["beta2"],
        "eps": values["eps"],
        "weight_decay": values["weightDecay"],
        "grad_clip_norm": values.get("gradClipNorm", 0.0),
    }
