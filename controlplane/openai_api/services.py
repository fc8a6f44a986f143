"""Completions for the OpenAI endpoints: an OpenAI request turned into sample operations by the
chat faces' services (``controlplane.completions``: the name resolved to a sampler, the prompt
rendered, the operations submitted exactly as ``asample`` does, and waited for)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controlplane.completions import names, rendering
from controlplane.completions.names import Authorize
from controlplane.completions.rendering import RenderError
from controlplane.completions.services import Completed, Prepared, prepare, prepared_complete
from controlplane.tenants.models import Tenant
from controlplane.training_sessions.services import vocabulary
from loopwright.types import SamplingParams

from . import chat_images
from .response_format import schema_of
from .schemas import ChatCompletionRequest, CompletionRequest, ImagePart, TextPart
from .schemas import Message as ChatMessage

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from controlplane.training_sessions.models import SamplingSession

ROLES = {"developer": "system"}  # OpenAI's newer name; chat templates know "system"


def chat_prepare(
    *, tenant: Tenant, req: ChatCompletionRequest, authorize: Authorize, api_key: str = ""
) -> Prepared:
    sampler = names.model_sampler(tenant=tenant, name=req.model, authorize=authorize)
    tokenizer = names.tokenizer_for(sampler.base_model)
    messages = [
        {
            "role": ROLES.get(m.role, m.role),
            "content": _content(m) if m.images() else m.text(),
            **({"name": m.name} if m.name else {}),
        }
        for m in req.messages
    ]
    images = [
        chat_images.image_chunk(part.image_url.url, f"messages[{i}].content[{j}].image_url.url")
        for i, m in enumerate(req.messages)
        if not isinstance(m.content, str)
        for j, part in enumerate(m.content)
        if isinstance(part, ImagePart)
    ]
    prompt = rendering.render_chat(tokenizer, messages)
    if images:
        return _prepared(
            sampler, tokenizer, [prompt], req, "messages", "chatcmpl-", api_key, [images]
        )
    return _prepared(sampler, tokenizer, [prompt], req, "messages", "chatcmpl-", api_key)


def _content(message: ChatMessage) -> list[dict]:
    """A message's parts as chat templates take them: text, and images as ``{"type": "image"}``
    (the template writes the model's image token for each)."""
    assert not isinstance(message.content, str)  # noqa: S101 — only called with parts
    return [
        {"type": "text", "text": part.text} if isinstance(part, TextPart) else {"type": "image"}
        for part in message.content
    ]


def text_prepare(
    *, tenant: Tenant, req: CompletionRequest, authorize: Authorize, api_key: str = ""
) -> Prepared:
    sampler = names.model_sampler(tenant=tenant, name=req.model, authorize=authorize)
    tokenizer = names.tokenizer_for(sampler.base_model)
    vocab = len(tokenizer)
    prompts = []
    for i, p in enumerate(req.prompts):
        ids = rendering.encode_prompt(tokenizer, p) if isinstance(p, str) else list(p)
        if not ids:
            raise RenderError("prompt: must not be empty", field="prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise RenderError(f"prompt[{i}]: token ids must be in [0, {vocab})", field="prompt")
        prompts.append(ids)
    return _prepared(sampler, tokenizer, prompts, req, "prompt", "cmpl-", api_key)


def _prepared(
    sampler: SamplingSession,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    req: ChatCompletionRequest | CompletionRequest,
    prompt_param: str,
    id_prefix: str,
    api_key: str,
    images: list[list[dict]] | None = None,
) -> Prepared:
    _bias_check(req, sampler.base_model)
    return prepare(
        images=images,
        sampler=sampler,
        tokenizer=tokenizer,
        prompts=prompts,
        params=_params(req),
        num_samples=req.choices_per_prompt,
        topk_logprobs=req.top_k_logprobs,
        model=req.model,
        prompt_param=prompt_param,
        id_prefix=id_prefix,
        api_key=api_key,
    )


def _params(req: ChatCompletionRequest | CompletionRequest) -> SamplingParams:
    """How to sample, from OpenAI's parameters (``max_tokens`` None: the rest of the context)."""
    return SamplingParams(
        max_tokens=req.token_limit,
        seed=req.seed,
        stop=req.stop_strings or None,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_k=-1 if req.top_k is None else req.top_k,
        top_p=1.0 if req.top_p is None else req.top_p,
        **_controls(req),
    )


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


def chat_complete(
    *,
    tenant: Tenant,
    req: ChatCompletionRequest,
    authorize: Authorize,
    idempotency_key: str | None = None,
    api_key: str = "",
) -> Completed:
    prepared = chat_prepare(tenant=tenant, req=req, authorize=authorize, api_key=api_key)
    return prepared_complete(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)


def text_complete(
    *,
    tenant: Tenant,
    req: CompletionRequest,
    authorize: Authorize,
    idempotency_key: str | None = None,
    api_key: str = "",
) -> Completed:
    prepared = text_prepare(tenant=tenant, req=req, authorize=authorize, api_key=api_key)
    return prepared_complete(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)
