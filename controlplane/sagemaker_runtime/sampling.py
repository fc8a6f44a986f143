"""``ExecuteSamplingOperation``: ``sample`` and ``computeLogprobs`` are the Tinker wire's
``asample`` (as ``compute_logprobs`` sends it: one sample of one token with the prompt's
logprobs) on a sampler of the session, submitted through the same service, IAM action and audit
row; ``loadWeightsForSampling`` opens that sampler on a saved version, and its operation id is
the sampler's.

The sampler: the model package version ``modelPackageArn`` names; without one, the session's
latest checkpoint (the newest weights its model saved for sampling) or, before any, the base
model (where the session's adapter starts). A sampler already open on those weights is reused,
so the worker loads them once.
"""

from __future__ import annotations

from django.db import transaction
from pydantic import ValidationError

from controlplane.audit.services import audited_transaction
from controlplane.edge.callers import allow, key_of
from controlplane.errors import DomainError
from controlplane.fleet.models import BaseModel
from controlplane.fleet.services import live_workers
from controlplane.iam.resources import sampler_arn
from controlplane.operations import sampling
from controlplane.training_sessions.models import (
    Checkpoint,
    Operation,
    SamplingSession,
    Session,
)
from controlplane.training_sessions.selectors import checkpoint_by_path
from controlplane.training_sessions.services.sample_options import sample_options
from loopwright.types import SampleRequest

from .passes import invalid
from .sessions import TrainingSession
from .shapes import ComputeLogprobsConfig, ExecuteSamplingOperation, SampleConfig

MAX_SAMPLES = 128  # per request: the engine's
MAX_TOPK_PROMPT = 64
MAX_STOPS, MAX_STOP_CHARS = 64, 1000


def sampling_execute(*, request, ts: TrainingSession, raw: object) -> Operation | SamplingSession:
    """The operation ``raw`` (the request's JSON body) describes: a sample operation, or the
    sampler a ``loadWeightsForSampling`` opened."""
    body = ExecuteSamplingOperation.model_validate(raw)
    member, config = body.operationConfig.member
    where = f"operationConfig.{member}"
    if member == "loadWeightsForSampling":
        return sampler_for(request, ts, config.modelPackageArn, f"{where}.modelPackageArn")
    if member == "sample":
        payload = sample_payload(ts, config, where)
    else:
        payload = logprobs_payload(ts, config, where)
    sampler = sampler_for(request, ts, config.modelPackageArn, f"{where}.modelPackageArn")
    with audited_transaction():  # the audit row and the operation: one commit
        allow(request, "sessions:Sample", sampler_arn(ts.tenant, sampler.id))
        return sampling.sample_submit(
            tenant=ts.tenant,
            sampling_session_id=sampler.id,
            seq_id=None,
            payload=payload,
            api_key=key_of(request),  # the access key pair's id: its usage and budgets
        )


def sample_payload(ts: TrainingSession, config: SampleConfig, where: str) -> dict:
    """The stored body of ``asample`` for a ``sample`` member."""
    params = config.samplingParams
    if config.numSamples > MAX_SAMPLES:
        raise invalid(f"{where}.numSamples", f"at most {MAX_SAMPLES} per operation here")
    topk = config.topkPromptLogprobs or 0
    if not 0 <= topk <= MAX_TOPK_PROMPT:
        raise invalid(f"{where}.topkPromptLogprobs", f"from 0 to {MAX_TOPK_PROMPT} here")
    if params.topP is not None and params.topP <= 0:
        raise invalid(f"{where}.samplingParams.topP", "must be above 0 here (1: no limit)")
    if params.topK is not None and params.topK < -1:
        raise invalid(f"{where}.samplingParams.topK", "-1 (no limit) or a count of tokens")
    stops = params.stop or []
    if len(stops) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise invalid(
            f"{where}.samplingParams.stop",
            f"at most {MAX_STOPS} sequences of at most {MAX_STOP_CHARS} characters here",
        )
    tokens = _prompt(config.prompt, f"{where}.prompt")
    _fits(ts, len(tokens), params.maxTokens, f"{where}.samplingParams.maxTokens")
    sampling_params = {
        "max_tokens": params.maxTokens,
        "seed": params.seed,
        "stop": stops or None,
        "temperature": 1.0 if params.temperature is None else params.temperature,
        "top_k": -1 if params.topK is None else params.topK,
        "top_p": 1.0 if params.topP is None else params.topP,
    }
    return _payload(
        prompt=tokens,
        num_samples=config.numSamples,
        sampling_params=sampling_params,
        prompt_logprobs=bool(config.includePromptLogprobs),
        topk_prompt_logprobs=topk,
    )


def logprobs_payload(ts: TrainingSession, config: ComputeLogprobsConfig, where: str) -> dict:
    """The stored body of ``asample`` for a ``computeLogprobs`` member."""
    tokens = _prompt(config.prompt, f"{where}.prompt")
    _fits(ts, len(tokens), 1, f"{where}.prompt")
    return _payload(
        prompt=tokens, num_samples=1, sampling_params={"max_tokens": 1}, prompt_logprobs=True
    )


def _payload(*, prompt: list[int], **fields) -> dict:
    body = {"prompt": {"chunks": [{"type": "encoded_text", "tokens": prompt}]}, **fields}
    try:
        req = SampleRequest.model_validate(body)
    except ValidationError as exc:  # the checks above leave nothing for it to find
        raise DomainError(f"sample: {exc.errors()[0]['msg']}") from None
    payload = req.model_dump(mode="json", exclude={"seq_id", "sampling_session_id", "type"})
    sample_options(payload)
    return payload


def _prompt(prompt, where: str) -> list[int]:
    tokens = [t for chunk in prompt.chunks for t in chunk.tokens]
    if not tokens:
        raise invalid(where, "must hold at least one token")
    return tokens


def _fits(ts: TrainingSession, prompt: int, new: int, where: str) -> None:
    """The prompt and the tokens asked for within the base model's context."""
    base = ts.model.base_model
    context = BaseModel.objects.filter(name=base).values_list("context_length", flat=True).first()
    if context is not None and prompt + new > context:
        raise invalid(
            where,
            f"the prompt ({prompt} tokens) and {new} new tokens exceed the context of "
            f"{base} here ({context} tokens)",
        )


# -- samplers ---------------------------------------------------------------------------------
def sampler_for(request, ts: TrainingSession, arn: str | None, field: str) -> SamplingSession:
    """The session's sampler on the weights ``arn`` names (or, without one, its latest
    checkpoint or base model); one is opened if none is."""
    tenant, session = ts.tenant, ts.session
    if arn is not None:
        ckpt = checkpoint_by_path(tenant=tenant, tinker_path=arn, field=field)
    else:
        ckpt = (
            Checkpoint.objects.filter(tenant=tenant, model=ts.model, kind=Checkpoint.Kind.SAMPLER)
            .order_by("-created_at", "-id")
            .first()
        )
    open_ones = SamplingSession.objects.filter(
        tenant=tenant, session=session, live_model=None, worker__in=live_workers()
    )
    if ckpt is not None:
        open_ones = open_ones.filter(model_path=ckpt.tinker_path, storage_path=ckpt.storage_path)
    else:
        open_ones = open_ones.filter(model_path="", base_model=ts.model.base_model)
    sampler = open_ones.order_by("-created_at").first()
    if sampler is not None:
        return sampler
    with transaction.atomic():
        # one opens it: the session's other requests for the same weights wait here, then
        # find it (a fan-out of samples would otherwise open one sampler each)
        Session.objects.select_for_update().filter(pk=session.pk).first()
        sampler = open_ones.order_by("-created_at").first()
        if sampler is not None:
            return sampler
        allow(request, "sessions:CreateSamplingSession", sampler_arn(tenant, "*"))
        return sampling.sampler_create(
            tenant=tenant,
            session_id=session.id,
            seq=None,
            base_model=None if ckpt is not None else ts.model.base_model,
            model_path=ckpt.tinker_path if ckpt is not None else None,
            model_id=None,
        )
