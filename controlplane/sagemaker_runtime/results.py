"""``GetTrainingOperationResult`` and ``GetSamplingOperationResult``: an operation of the session,
awaited for a while as ``retrieve_future`` awaits it, answered in the service model's shapes.

Token usage is the operation's bill, counted by the metering's own rule: ``trainingTokens`` for
a forward or forward-backward pass; for a sample, each sequence's ``decode`` is its tokens and
the request's ``prefill`` (the prompt, prefilled once for all its samples) is counted on the
first sequence, so the sequences' sums are what the request is billed.
"""

from __future__ import annotations

import socket
import time

from django.conf import settings

from controlplane.metering.models import Meter
from controlplane.metering.tokens import operation_usage
from controlplane.operations import notices
from controlplane.registry.models import ModelPackage
from controlplane.registry.services import package_arn
from controlplane.training_sessions.errors import NotFound
from controlplane.training_sessions.models import Operation, SamplingSession
from controlplane.training_sessions.services import failover

from .sessions import TrainingSession
from .training import MEMBERS

STATUS = {
    Operation.Status.PENDING: "Pending",
    Operation.Status.RUNNING: "InProgress",
    Operation.Status.DONE: "Completed",
    Operation.Status.FAILED: "Failed",
}
SAVES = (Operation.Kind.SAVE_WEIGHTS, Operation.Kind.SAVE_WEIGHTS_FOR_SAMPLER)
PASSES = (Operation.Kind.FORWARD, Operation.Kind.FORWARD_BACKWARD)


def operation_of(ts: TrainingSession, operation_id: str, *, sampling: bool) -> Operation:
    """The session's training (or sampling) operation ``operation_id``; any other is not found."""
    query = Operation.objects.filter(tenant=ts.tenant, session=ts.session, id=operation_id)
    if sampling:
        query = query.filter(kind=Operation.Kind.SAMPLE)
    else:
        query = query.filter(model=ts.model, kind__in=list(MEMBERS))
    op = query.first()
    if op is None:
        raise not_found_operation(operation_id)
    return op


def not_found_operation(operation_id: str) -> NotFound:
    return NotFound(
        f"Operation {operation_id[:64]!r} does not exist in this training session",
        field="operationId",
    )


def awaited(op: Operation) -> Operation:
    """``op`` once finished, or as it stands after the long poll (then, as ``retrieve_future``
    does, a look for workers that died unnoticed)."""
    op = notices.wait_finished(op, time.monotonic() + settings.LONG_POLL_SECONDS)
    if op.status not in Operation.FINISHED:
        failover.look_for_dead_workers(by=f"control plane {socket.gethostname()}")
    return op


def training_result(op: Operation) -> dict:
    """The ``GetTrainingOperationResult`` answer for ``op`` as it stands."""
    out: dict = {"status": STATUS[op.status]}
    if op.status == Operation.Status.FAILED:
        out["errorDetails"] = op.error or "the operation failed"
    if op.status != Operation.Status.DONE:
        return out
    result = _public(op.result)
    member = MEMBERS[op.kind]
    if op.kind in PASSES:
        usage = {"trainingTokens": _training_tokens(op)}
        out["tokenUsage"] = usage
        body = {
            "lossFnOutputType": str(result.get("loss_fn_output_type") or ""),
            "lossFnOutputs": [_tensors(o) for o in result.get("loss_fn_outputs") or ()],
            "metrics": _metrics(result.get("metrics")),
            "tokenUsage": usage,
        }
    elif op.kind == Operation.Kind.OPTIM_STEP:
        body = {"metrics": _metrics(result.get("metrics"))}
    elif op.kind in SAVES:
        body = {"modelPackageArn": saved_package_arn(op)}
    else:  # loadState
        body = {}
    out["operationResult"] = {member: body}
    return out


def sampling_result(op: Operation) -> dict:
    """The ``GetSamplingOperationResult`` answer for a sample operation as it stands."""
    out: dict = {"status": STATUS[op.status]}
    if op.status == Operation.Status.FAILED:
        out["errorDetails"] = op.error or "the operation failed"
    if op.status != Operation.Status.DONE:
        return out
    result = _public(op.result)
    sequences = result.get("sequences") or []
    if _is_logprobs(op):
        logprobs = list(result.get("prompt_logprobs") or [])
        out["operationResult"] = {"computeLogprobs": {"logprobs": logprobs}}
        return out
    usage = operation_usage(op.kind, op.payload or {}, op.result or {})
    prefill = usage.get(Meter.PREFILL_TOKENS, 0)
    sample: dict = {
        "sequences": [_sequence(s, prefill if i == 0 else 0) for i, s in enumerate(sequences)]
    }
    if (op.payload or {}).get("prompt_logprobs"):
        # from the second prompt token on: the first has no context to be scored in
        sample["promptLogprobs"] = [v for v in (result.get("prompt_logprobs") or [])[1:]]
    if (op.payload or {}).get("topk_prompt_logprobs"):
        topk = (result.get("topk_prompt_logprobs") or [])[1:]
        sample["topkPromptLogprobs"] = [
            [{"tokenId": int(t), "logprob": float(lp)} for t, lp in (row or ())] for row in topk
        ]
    out["operationResult"] = {"sample": sample}
    return out


def loaded_result(sampler: SamplingSession) -> dict:
    """A ``loadWeightsForSampling``'s answer: done once its sampler is open."""
    return {"status": "Completed", "operationResult": {"loadWeightsForSampling": {}}}


def _is_logprobs(op: Operation) -> bool:
    """A ``computeLogprobs`` (a ``sample`` asks for at least 512 tokens)."""
    payload = op.payload or {}
    max_tokens = (payload.get("sampling_params") or {}).get("max_tokens")
    return bool(payload.get("prompt_logprobs")) and max_tokens == 1


def _sequence(seq: dict, prefill: int) -> dict:
    tokens = [int(t) for t in seq.get("tokens") or ()]
    out = {
        "stopReason": "stop" if seq.get("stop_reason") == "stop" else "length",
        "tokens": tokens,
        "tokenUsage": {"prefill": prefill, "decode": len(tokens)},
    }
    if seq.get("logprobs") is not None:
        out["logprobs"] = [float(v) for v in seq["logprobs"]]
    return out


def saved_package_arn(op: Operation) -> str | None:
    """The model package version the save registered (its group is the session's)."""
    package = (
        ModelPackage.objects.select_related("tenant", "group")
        .filter(tenant_id=op.tenant_id, model_id=op.model_id, step=op.seq_id)
        .order_by("-id")
        .first()
    )
    return package_arn(package) if package is not None else None


def _training_tokens(op: Operation) -> int:
    usage = operation_usage(op.kind, op.payload or {}, op.result or {})
    return int(usage.get(Meter.TRAIN_TOKENS, usage.get(Meter.FORWARD_TOKENS, 0)))


def _tensors(output: dict) -> dict:
    return {
        name: {
            "data": t.get("data", []),
            "dtype": t.get("dtype", "float32"),
            **({"shape": t["shape"]} if t.get("shape") is not None else {}),
        }
        for name, t in (output or {}).items()
        if isinstance(t, dict)
    }


def _metrics(metrics: object) -> dict[str, float]:
    if not isinstance(metrics, dict):
        return {}
    return {str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float)}


def _public(result: dict | None) -> dict:
    return {k: v for k, v in (result or {}).items() if not k.startswith("_")}
