"""Sample operations for a face's request: one per prompt, submitted exactly as ``asample``
submits them (ordering, metering, quotas), waited for, and read back as choices and usage.

A face resolves the name (``names``), renders its prompts and says how to sample
(``SamplingParams``); ``prepare`` checks that each prompt and its completion fit the context and
makes the operations' payloads. Nothing here knows a face's request or answer shapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from controlplane.fleet.models import BaseModel
from controlplane.operations import admission, notices, sampling, token_notices
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.errors import Conflict
from controlplane.training_sessions.models import Operation, SamplingSession
from loopwright.types import ModelInput, SampleRequest, SamplingParams

from . import rendering
from .errors import OperationFailed, Timeout
from .names import context_length
from .rendering import Choice, RenderError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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


@dataclass(frozen=True)
class Prepared:
    """A request ready to submit: its sampler, tokenizer, prompts and one payload per prompt."""

    sampler: SamplingSession
    tokenizer: PreTrainedTokenizerBase
    prompts: list[list[int]]
    payloads: list[dict]
    model: str
    stops: list[str]
    id_prefix: str  # the answer's id is this and the first operation's id
    api_key: str = ""  # the caller's key prefix: its operations and usage name it
    image_tokens: int = 0  # what the prompts' images take beyond their one rendered token each

    @property
    def prompt_tokens(self) -> int:
        """The prompts' tokens as the model takes them: each image its registered count."""
        return sum(len(p) for p in self.prompts) + self.image_tokens


def prepare(
    *,
    sampler: SamplingSession,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    params: SamplingParams,
    num_samples: int = 1,
    topk_logprobs: int = 0,
    model: str,
    prompt_param: str,
    id_prefix: str,
    api_key: str = "",
    images: list[list[dict]] | None = None,
) -> Prepared:
    """The operations of ``prompts`` sampled with ``params`` (``max_tokens`` None: the rest of
    the context); a prompt that leaves no room, or a ``max_tokens`` past it, is a 400 naming
    ``prompt_param`` or ``max_tokens``. ``api_key``: the caller's key prefix. ``images``: each
    prompt's image chunks, in the order of the image tokens its rendering holds."""
    context = sampler.context_length or context_length(sampler.base_model)  # what it asked for
    payloads = [
        sample_payload(p, params, num_samples, topk_logprobs, context, prompt_param)
        for p in prompts
    ]
    image_tokens = 0
    if images:
        token, per_image = _image_token(tokenizer, sampler.base_model, prompt_param)
        image_tokens = sum(len(chunks) for chunks in images) * (per_image - 1)
        for k, (p, chunks) in enumerate(zip(prompts, images, strict=True)):
            payloads[k] = sample_payload(
                p,
                params,
                num_samples,
                topk_logprobs,
                context,
                prompt_param,
                chunks=_with_images(p, chunks, token, prompt_param),
                extra_tokens=len(chunks) * (per_image - 1),
            )
    stops = [params.stop] if isinstance(params.stop, str) else list(params.stop or [])
    strings = [s for s in stops if isinstance(s, str)]
    return Prepared(
        sampler, tokenizer, prompts, payloads, model, strings, id_prefix, api_key, image_tokens
    )


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
        prompt_tokens=prepared.prompt_tokens,
        completion_tokens=sum(c.sampled_tokens for c in choices),
        tokenizer=tokenizer,
    )


def completion_id(prepared: Prepared, ops: list[Operation]) -> str:
    return f"{prepared.id_prefix}{ops[0].id}"


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
    return _submitted(tenant, prepared, payloads, idempotency_key, request_ids)


def _submitted(
    tenant: Tenant,
    prepared: Prepared,
    payloads: list[dict],
    idempotency_key: str | None,
    request_ids: list[str] | None,
) -> list[Operation]:
    """One sample operation per prompt, submitted together so that the worker batches them
    (each is metered alone). With an ``idempotency_key``, a retry of the same request gets the
    same operations back (nothing runs or is metered again, streamed or not); the key with
    another request, or with another number of prompts, is a 409."""
    sampler, model = prepared.sampler, prepared.model
    ids: list[str | None] = list(request_ids) if request_ids else [None] * len(payloads)
    if idempotency_key is None:
        return [
            sampling.sample_submit(
                tenant=tenant,
                sampling_session_id=sampler.id,
                seq_id=None,
                payload=payload,
                request_id=request_id,
                api_key=prepared.api_key,
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
                    api_key=prepared.api_key,
                )
                for key, payload, request_id in zip(keys, payloads, ids, strict=True)
            ]
        except Conflict:
            raise reused from None


def _unstreamed(payload: dict) -> dict:
    """A payload as the request digest sees it: streamed or not is the same request."""
    return {k: v for k, v in payload.items() if k != token_notices.STREAM_KEY}


def sample_payload(
    prompt: list[int],
    params: SamplingParams,
    num_samples: int,
    topk_logprobs: int,
    context: int,
    param: str,
    chunks: list[dict] | None = None,
    extra_tokens: int = 0,
) -> dict:
    """The body ``asample`` would store for this prompt (``chunks``: as these chunks, which
    take ``extra_tokens`` more than the prompt), plus the top logprobs asked for."""
    length = len(prompt) + extra_tokens
    room = context - length
    limit = params.max_tokens
    if room <= 0 or (limit is not None and limit > room):
        asked = f"{length} tokens in the {param}"
        if limit is not None:
            asked = f"{length + limit} tokens ({asked}, {limit} in the completion)"
        raise RenderError(
            f"This model's maximum context length is {context} tokens. However, you "
            f"requested {asked}.",
            field=param if room <= 0 else "max_tokens",
        )
    body = SampleRequest(
        num_samples=num_samples,
        prompt=ModelInput.from_ints(prompt) if chunks is None else ModelInput(chunks=chunks),
        sampling_params=params.model_copy(update={"max_tokens": limit or room}),
    ).model_dump(mode="json", exclude={"seq_id", "sampling_session_id", "type"})
    if topk_logprobs:
        body["topk_logprobs"] = topk_logprobs
    return body


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


def _image_token(
    tokenizer: PreTrainedTokenizerBase, base_model: str, param: str
) -> tuple[int, int]:
    """The token the chat template writes for an image, and how many tokens an image takes."""
    per_image = (
        BaseModel.objects.filter(name=base_model).values_list("image_tokens", flat=True).first()
    )
    text = getattr(tokenizer, "image_token", None) or "<image>"
    token = tokenizer.convert_tokens_to_ids(text)
    if per_image is None or not isinstance(token, int) or token == tokenizer.unk_token_id:
        raise RenderError(f"{param}: this model takes no images", field=param)
    return token, max(per_image, 1)


def _with_images(prompt: list[int], images: list[dict], token: int, param: str) -> list[dict]:
    """The rendered prompt's chunks: its text runs, and the images where it holds image tokens."""
    chunks: list[dict] = []
    run: list[int] = []
    queue = list(images)
    for t in prompt:
        if t != token:
            run.append(t)
            continue
        if not queue:
            raise RenderError(
                f"{param}: the chat template wrote more images than sent", field=param
            )
        if run:
            chunks.append({"type": "encoded_text", "tokens": run})
            run = []
        chunks.append(queue.pop(0))
    if queue:
        raise RenderError(
            f"{param}: the chat template did not place {len(queue)} of the images", field=param
        )
    if run:
        chunks.append({"type": "encoded_text", "tokens": run})
    return chunks
