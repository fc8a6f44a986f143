"""Messages for Anthropic's face: the conversation rendered with the model's chat template (the
system prompt its first turn, each message a turn, exactly as ``/v1/chat/completions`` renders
the same conversation), sampled by the chat faces' services (``controlplane.completions``):
the same sampler, operations, metering and audit as ``/v1``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controlplane.completions import names, rendering
from controlplane.completions.names import Authorize
from controlplane.completions.services import Completed, Prepared, prepare, prepared_complete
from controlplane.tenants.models import Tenant
from loopwright.types import SamplingParams

from .schemas import Conversation, CountTokensRequest, MessagesRequest

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from controlplane.training_sessions.models import SamplingSession

ID_PREFIX = "msg_"


def _prompt(
    tenant: Tenant, req: Conversation, authorize: Authorize
) -> tuple[SamplingSession, PreTrainedTokenizerBase, list[int]]:
    """The sampler serving ``req.model``, its tokenizer and the rendered prompt."""
    sampler = names.model_sampler(tenant=tenant, name=req.model, authorize=authorize)
    tokenizer = names.tokenizer_for(sampler.base_model)
    messages = [{"role": "system", "content": req.system_text}] if req.system_text else []
    messages += [{"role": m.role, "content": m.text()} for m in req.messages]
    prompt = rendering.render_chat(tokenizer, messages, continue_final=req.continues)
    return sampler, tokenizer, prompt


def messages_prepare(
    *, tenant: Tenant, req: MessagesRequest, authorize: Authorize, api_key: str = ""
) -> Prepared:
    sampler, tokenizer, prompt = _prompt(tenant, req, authorize)
    params = SamplingParams(
        max_tokens=req.max_tokens,
        stop=list(req.stop_sequences) if req.stop_sequences else None,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_k=req.top_k or -1,  # 0 or none: no limit
        top_p=1.0 if req.top_p is None else req.top_p,
    )
    return prepare(
        sampler=sampler,
        tokenizer=tokenizer,
        prompts=[prompt],
        params=params,
        model=req.model,
        prompt_param="messages",
        id_prefix=ID_PREFIX,
        api_key=api_key,
    )


def messages_complete(
    *,
    tenant: Tenant,
    req: MessagesRequest,
    authorize: Authorize,
    idempotency_key: str | None = None,
    api_key: str = "",
) -> Completed:
    prepared = messages_prepare(tenant=tenant, req=req, authorize=authorize, api_key=api_key)
    return prepared_complete(tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)


def tokens_count(*, tenant: Tenant, req: CountTokensRequest, authorize: Authorize) -> int:
    """The input tokens ``/v1/messages`` would bill for this conversation (nothing is sampled
    or metered); authorized as that request would be."""
    _, _, prompt = _prompt(tenant, req, authorize)
    return len(prompt)
