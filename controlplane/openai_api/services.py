"""Completions for the OpenAI endpoints: resolve the model name to a sampler, render the prompt,
submit sample operations exactly as ``asample`` does (ordering, metering, quotas), and wait.

Model names: ``sampler-…`` (a sampler), ``model-…`` (a training model's current weights),
``sess-…`` (a session's newest sampler), a ``tinker://`` checkpoint path or a model package
version ARN (a sampler on the saved weights, made on first use in an open session).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from controlplane.fleet.models import BaseModel
from controlplane.fleet.selectors import base_model_require
from controlplane.fleet.services import live_workers
from controlplane.iam.resources import checkpoint_arn, sampler_arn
from controlplane.operations import admission, notices, sampling, token_notices
from controlplane.tenants.models import Tenant
from controlplane.training_sessions import selectors
from controlplane.training_sessions.errors import Conflict, NotActive, NotFound
from controlplane.training_sessions.models import (
    Operation,
    SamplingSession,
    Session,
    TrainingModel,
)
from controlplane.training_sessions.services import vocabulary
from loopwright.types import ModelInput, SampleRequest, SamplingParams

from . import rendering
from .errors import ModelNotFound, OperationFailed, Timeout
from .rendering import Choice, RenderError
from .response_format import schema_of
from .schemas import ChatCompletionRequest, CompletionRequest

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Authorize = Callable[[str, str], None]  # (action, resource ARN): raises AccessDenied
OPEN = admission.OPEN_STATES
CHECKPOINT_PREFIXES = ("tinker://", "arn:")
ROLES = {"developer": "system"}  # OpenAI's newer name; chat templates know "system"


@dataclass(frozen=True)
class Completed:
    """A finished request: its choices (index = prompt × n + sample) and the tokens it used."""

    id: str
    created: int
    model: str
    choices: list[Choice]
    prompt_tokens: int
    completion_tokens: int
    tokenizer: PreTrainedTokenizerBase


# -- model names ------------------------------------------------------------------------------
@contextmanager
def _as_model_not_found(name: str) -> Iterator[None]:
    try:
        yield
    except NotFound:
        raise ModelNotFound(name) from None


def model_sampler(*, tenant: Tenant, name: str, authorize: Authorize) -> SamplingSession:
    """The sampler that serves ``name`` to the caller; another tenant's name is not found."""
    with _as_model_not_found(name):
        if name.startswith(CHECKPOINT_PREFIXES):
            sampler = _checkpoint_sampler(tenant, name, authorize)
        elif name.startswith("sampler-"):
            sampler = selectors.sampler_get(tenant=tenant, sampling_session_id=name)
        elif name.startswith("model-"):
            model = selectors.model_get(tenant=tenant, model_id=name)
            sampler = _live_sampler(tenant, model, authorize)
        elif name.startswith("sess-"):
            session = selectors.session_get(tenant=tenant, session_id=name)
            newest = _newest_sampler(tenant, session, authorize)
            if newest is None:
                raise ModelNotFound(name)
            sampler = newest
        else:
            raise ModelNotFound(name)
    authorize("sessions:Sample", sampler_arn(tenant, sampler.id))
    return sampler


def _live_sampler(tenant: Tenant, model: TrainingModel, authorize: Authorize) -> SamplingSession:
    """A sampler on the model's adapter as it trains (one is made on first use)."""
    sampler = (
        SamplingSession.objects.filter(tenant=tenant, live_model=model, worker_id=model.worker_id)
        .order_by("-created_at")
        .first()
    )
    if sampler is None:
        authorize("sessions:CreateSamplingSession", sampler_arn(tenant, "*"))
        sampler = sampling.sampler_create(
            tenant=tenant,
            session_id=model.session_id,
            seq=None,
            base_model=None,
            model_path=None,
            model_id=model.id,
        )
    return sampler


def _newest_sampler(
    tenant: Tenant, session: Session, authorize: Authorize
) -> SamplingSession | None:
    """The session's newest sampler; without one, a sampler on its newest ready model."""
    sampler = session.sampling_sessions.order_by("-created_at", "-id").first()
    if sampler is not None:
        return sampler
    model = session.models.filter(state=TrainingModel.State.READY).order_by("-created_at").first()
    if model is None:
        return None
    return _live_sampler(tenant, model, authorize)


def _checkpoint_sampler(tenant: Tenant, path: str, authorize: Authorize) -> SamplingSession:
    """A sampler on saved weights: one already open on them, else a new one in the checkpoint's
    own session or, once that ended, in the account's newest open session."""
    ckpt = selectors.checkpoint_by_path(tenant=tenant, tinker_path=path, field="model")
    authorize("sessions:CreateChatCompletion", checkpoint_arn(tenant, ckpt.model_id, ckpt.name))
    sampler = (
        SamplingSession.objects.filter(
            tenant=tenant,
            model_path=ckpt.tinker_path,
            storage_path=ckpt.storage_path,  # not a sampler on weights the path held before
            session__state__in=OPEN,
            worker__in=live_workers(),
        )
        .order_by("-created_at")
        .first()
    )
    if sampler is not None:
        return sampler
    session: Session | None = ckpt.model.session
    if session is None or session.state not in OPEN:
        session = (
            Session.objects.filter(tenant=tenant, state__in=OPEN).order_by("-created_at").first()
        )
    if session is None:
        raise NotActive(
            f"no open session of this account can serve {path}: start a session, then retry",
            field="model",
        )
    authorize("sessions:CreateSamplingSession", sampler_arn(tenant, "*"))
    return sampling.sampler_create(
        tenant=tenant,
        session_id=session.id,
        seq=None,
        base_model=None,
        model_path=ckpt.tinker_path,
        model_id=None,
    )


# -- tokenizers ---------------------------------------------------------------------------------
_tokenizers: dict[str, tuple[object, PreTrainedTokenizerBase]] = {}
_tokenizers_lock = threading.Lock()


def tokenizer_for(base_model: str) -> PreTrainedTokenizerBase:
    """The base model's tokenizer, built once from the files its worker registered (and again
    when a worker registers it anew)."""
    stamp = BaseModel.objects.filter(name=base_model).values_list("updated_at", flat=True).first()
    if stamp is None:
        base_model_require(base_model, field="model")
    cached = _tokenizers.get(base_model)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    base = BaseModel.objects.get(name=base_model)
    tokenizer = rendering.tokenizer_load(base.tokenizer_files, base.chat_template)
    with _tokenizers_lock:
        _tokenizers[base_model] = (base.updated_at, tokenizer)
    return tokenizer


def _context_length(base_model: str) -> int:
    return BaseModel.objects.filter(name=base_model).values_list("context_length", flat=True)[0]


# -- completions --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prepared:
    """A request ready to submit: its sampler, tokenizer, prompts and one payload per prompt."""

    sampler: SamplingSession
    tokenizer: PreTrainedTokenizerBase
    prompts: list[list[int]]
    payloads: list[dict]
    model: str
    stops: list[str]
    id_prefix: str


def chat_prepare(*, tenant: Tenant, req: ChatCompletionRequest, authorize: Authorize) -> Prepared:
    sampler = model_sampler(tenant=tenant, name=req.model, authorize=authorize)
    tokenizer = tokenizer_for(sampler.base_model)
    messages = [
        {
            "role": ROLES.get(m.role, m.role),
            "content": m.text(),
            **({"name": m.name} if m.name else {}),
        }
        for m in req.messages
    ]
    prompt = rendering.render_chat(tokenizer, messages)
    return _prepared(sampler, tokenizer, [prompt], req, "messages", "chatcmpl")


def text_prepare(*, tenant: Tenant, req: CompletionRequest, authorize: Authorize) -> Prepared:
    sampler = model_sampler(tenant=tenant, name=req.model, authorize=authorize)
    tokenizer = tokenizer_for(sampler.base_model)
    vocab = len(tokenizer)
    prompts = []
    for i, p in enumerate(req.prompts):
        ids = rendering.encode_prompt(tokenizer, p) if isinstance(p, str) else list(p)
        if not ids:
            raise RenderError("prompt: must not be empty", field="prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise RenderError(f"prompt[{i}]: token ids must be in [0, {vocab})", field="prompt")
        prompts.append(ids)
    return _prepared(sampler, tokenizer, prompts, req, "prompt", "cmpl")


def _prepared(
    sampler: SamplingSession,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    req: ChatCompletionRequest | CompletionRequest,
    prompt_param: str,
    id_prefix: str,
) -> Prepared:
    context = _context_length(sampler.base_model)
    _bias_check(req, sampler.base_model)
    payloads = [_payload(p, req, context, prompt_param) for p in prompts]
    return Prepared(sampler, tokenizer, prompts, payloads, req.model, req.stop_strings, id_prefix)


def chat_complete(
    *,
    tenant: Tenant,
    req: ChatCompletionRequest,
    authorize: Authorize,
    idempotency_key: str | None = None,
) -> Completed:
    prepared = chat_prepare(tenant=tenant, req=req, authorize=authorize)
    return prepared_complete(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)


def text_complete(
    *,
    tenant: Tenant,
    req: CompletionRequest,
    authorize: Authorize,
    idempotency_key: str | None = None,
) -> Completed:
    prepared = text_prepare(tenant=tenant, req=req, authorize=authorize)
    return prepared_complete(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)


def prepared_complete(
    *, tenant: Tenant, prepared: Prepared, idempotency_key: str | None
) -> Completed:
    """Submit, wait for every operation, and answer."""
    ops = prepared_submit(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)
    deadline = time.monotonic() + settings.OPENAI_WAIT_SECONDS
    for op in ops:
        operation_wait(op, deadline)
    return completed(prepared, ops)


def completed(prepared: Prepared, ops: list[Operation]) -> Completed:
    """The answer of finished operations (the first failed one raises ``OperationFailed``)."""
    tokenizer, stops, eos = prepared.tokenizer, prepared.stops, prepared.tokenizer.eos_token_id
    choices = []
    for op in ops:
        if op.status == Operation.Status.FAILED:
            raise OperationFailed(op.error, category=op.error_category or "server")
        choices += [rendering.choice_of(tokenizer, s, stops, eos) for s in op.result["sequences"]]
    return Completed(
        id=completion_id(prepared, ops),
        created=int(ops[0].created_at.timestamp()),
        model=prepared.model,
        choices=choices,
        prompt_tokens=sum(len(p) for p in prepared.prompts),
        completion_tokens=sum(c.sampled_tokens for c in choices),
        tokenizer=tokenizer,
    )


def completion_id(prepared: Prepared, ops: list[Operation]) -> str:
    return f"{prepared.id_prefix}-{ops[0].id}"


def prepared_submit(
    *,
    tenant: Tenant,
    prepared: Prepared,
    idempotency_key: str | None,
    request_ids: list[str] | None = None,
) -> list[Operation]:
    """Submit the prepared operations. ``request_ids``: the ids to give them (a stream listens
    for their tokens before they exist); their payloads then ask the worker to stream."""
    payloads = prepared.payloads
    if request_ids is not None:
        payloads = [{**p, token_notices.STREAM_KEY: True} for p in payloads]
    return _submitted(
        tenant, prepared.sampler, payloads, prepared.model, idempotency_key, request_ids
    )


def _submitted(
    tenant: Tenant,
    sampler: SamplingSession,
    payloads: list[dict],
    model: str,
    idempotency_key: str | None,
    request_ids: list[str] | None,
) -> list[Operation]:
    """One sample operation per prompt, submitted together so that the worker batches them
    (each is metered alone). With an ``idempotency_key``, a retry of the same request gets the
    same operations back (nothing runs or is metered again, streamed or not); the key with
    another request, or with another number of prompts, is a 409."""
    ids: list[str | None] = list(request_ids) if request_ids else [None] * len(payloads)
    if idempotency_key is None:
        return [
            sampling.sample_submit(
                tenant=tenant,
                sampling_session_id=sampler.id,
                seq_id=None,
                payload=payload,
                request_id=request_id,
            )
            for payload, request_id in zip(payloads, ids, strict=True)
        ]
    keys = [f"{idempotency_key}#{i}/{len(payloads)}" for i in range(len(payloads))]
    reused = Conflict(
        f"Idempotency-Key {idempotency_key!r} was already used by a different request",
        field="Idempotency-Key",
    )
    with transaction.atomic():
        earlier = set(
            Operation.objects.filter(
                tenant=tenant, idempotency_key__startswith=f"{idempotency_key}#"
            ).values_list("idempotency_key", flat=True)
        )
        if earlier and earlier != set(keys):
            raise reused
        try:
            return [
                sampling.sample_submit(
                    tenant=tenant,
                    sampling_session_id=sampler.id,
                    seq_id=None,
                    payload=payload,
                    idempotency_key=key,
                    request_digest=admission.digest(
                        {"model": model, "payload": _unstreamed(payload)}
                    ),
                    request_id=request_id,
                )
                for key, payload, request_id in zip(keys, payloads, ids, strict=True)
            ]
        except Conflict:
            raise reused from None


def _unstreamed(payload: dict) -> dict:
    """A payload as the request digest sees it: streamed or not is the same request."""
    return {k: v for k, v in payload.items() if k != token_notices.STREAM_KEY}


def _payload(
    prompt: list[int], req: ChatCompletionRequest | CompletionRequest, context: int, param: str
) -> dict:
    """The body ``asample`` would store for this prompt, plus the top logprobs asked for."""
    room = context - len(prompt)
    limit = req.token_limit
    if room <= 0 or (limit is not None and limit > room):
        asked = f"{len(prompt)} tokens in the {param}"
        if limit is not None:
            asked = f"{len(prompt) + limit} tokens ({asked}, {limit} in the completion)"
        raise RenderError(
            f"This model's maximum context length is {context} tokens. However, you "
            f"requested {asked}.",
            field=param if room <= 0 else "max_tokens",
        )
    params = SamplingParams(
        max_tokens=limit if limit is not None else room,
        seed=req.seed,
        stop=req.stop_strings or None,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_k=-1 if req.top_k is None else req.top_k,
        top_p=1.0 if req.top_p is None else req.top_p,
        **_controls(req),
    )
    body = SampleRequest(
        num_samples=req.choices_per_prompt,
        prompt=ModelInput.from_ints(prompt),
        sampling_params=params,
    ).model_dump(mode="json", exclude={"seq_id", "sampling_session_id", "type"})
    if req.top_k_logprobs:
        body["topk_logprobs"] = req.top_k_logprobs
    return body


def _controls(req: ChatCompletionRequest | CompletionRequest) -> dict:
    """The request's sampling controls as ``SamplingParams`` fields; a value that changes
    nothing (a 0 penalty, a repetition penalty of 1, an empty bias) is left out, so that it is
    the same request as without it."""
    given = {
        "min_p": req.min_p or None,
        "repetition_penalty": None if req.repetition_penalty == 1 else req.repetition_penalty,
        "presence_penalty": req.presence_penalty or None,
        "frequency_penalty": req.frequency_penalty or None,
        "logit_bias": req.logit_bias or None,
        "json_schema": schema_of(req.response_format),
        "logprobs_of": None if req.logprobs_mode == "sampled" else req.logprobs_mode,
    }
    return {k: v for k, v in given.items() if v is not None}


def _bias_check(req: ChatCompletionRequest | CompletionRequest, base_model: str) -> None:
    if req.logit_bias:
        highest = max(int(token) for token in req.logit_bias)
        vocabulary.vocab_check(base_model=base_model, highest=highest, field="logit_bias")


def operation_wait(op: Operation, deadline: float) -> Operation:
    """Wait until ``op`` finishes (woken by the worker's notice on PostgreSQL, else polling);
    past ``deadline`` (monotonic) it raises ``Timeout``: the operation still runs."""
    op = notices.wait_finished(op, deadline)
    if op.status not in Operation.FINISHED:
        raise Timeout(
            f"the request did not finish within {settings.OPENAI_WAIT_SECONDS:g} s "
            f"(request {op.id} is still queued and will be metered when it runs)"
        )
    return op
