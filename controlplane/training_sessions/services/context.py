"""Context as a setting: a session, a training model or a sampler may ask for a context length
up to its base model's maximum (``context_length``, or tinker's ``<base>:peft:<n>`` model names,
the same request), and its requests are then held to it when they arrive: a datum longer than
it, or a prompt and its ``max_tokens`` past it, is a 400 naming the field. Tokens are priced as
at any other length: the setting itself costs nothing."""

from __future__ import annotations

import re

from controlplane.errors import DomainError
from controlplane.fleet.models import BaseModel

PEFT_NAME = re.compile(r"(?P<base>.+):peft:(?P<tokens>[0-9]{1,10})")


def base_and_context(
    name: str, context_length: int | None, *, field: str = "base_model"
) -> tuple[str, int | None]:
    """The base model a name asks for and the context length it asks for with it: ``<base>``
    and ``context_length``, or ``<base>:peft:<n>`` and ``n`` (a ``context_length`` given too
    must be the same)."""
    found = PEFT_NAME.fullmatch(name)
    if found is None:
        return name, context_length
    tokens = int(found["tokens"])
    if context_length is not None and context_length != tokens:
        raise DomainError(
            f"{field}: {name} asks for a context of {tokens} tokens, context_length for "
            f"{context_length}; give one, or the same in both",
            field="context_length",
        )
    return found["base"], tokens


def base_name(name: str) -> str:
    """The base model a name (perhaps ``<base>:peft:<n>``) is of."""
    found = PEFT_NAME.fullmatch(name)
    return found["base"] if found else name


def context_checked(
    *, base_model: str, context_length: int | None, field: str = "context_length"
) -> int | None:
    """``context_length`` if ``base_model`` (a known one) holds it; None means its maximum."""
    if context_length is None:
        return None
    maximum = max_context(base_model)
    if not 1 <= context_length <= maximum:
        raise DomainError(
            f"{field}: a context of {context_length} tokens is outside what {base_model} "
            f"holds, 1 to {maximum} tokens (its maximum, get_server_capabilities' "
            "max_context_length)",
            field=field,
        )
    return context_length


def max_context(base_model: str) -> int:
    found = BaseModel.objects.filter(name=base_model).values_list("context_length", flat=True)
    return found.first() or 0


def longest_input(batch: dict | None) -> int:
    """The tokens of the longest datum of a forward(-backward) batch (its JSON); 0 if none."""
    longest = 0
    for datum in (batch or {}).get("data") or ():
        chunks = ((datum or {}).get("model_input") or {}).get("chunks") or ()
        longest = max(longest, sum(_chunk_tokens(c) for c in chunks if isinstance(c, dict)))
    return longest


def _chunk_tokens(chunk: dict) -> int:
    tokens = chunk.get("tokens")
    if isinstance(tokens, list):
        return len(tokens)
    expected = chunk.get("expected_tokens")  # an image: the tokens it stands for
    return expected if isinstance(expected, int) else 0


def inputs_fit(*, context_length: int | None, batch: dict | None, field: str) -> None:
    """Refuse a forward(-backward) batch with a datum longer than the model's context."""
    if context_length is None:
        return
    data = (batch or {}).get("data") or ()
    for i, datum in enumerate(data):
        n = longest_input({"data": [datum]})
        if n > context_length:
            raise DomainError(
                f"{field}[{i}].model_input: {n} tokens, over this model's context of "
                f"{context_length} tokens (its context_length)",
                field=f"{field}[{i}].model_input",
            )


def sample_fits(*, context_length: int | None, payload: dict) -> dict:
    """``payload`` if its prompt and ``max_tokens`` fit the sampler's context (a ``max_tokens``
    left out is the rest of that context, written in); else refused."""
    if context_length is None:
        return payload
    prompt = longest_input({"data": [{"model_input": payload.get("prompt")}]})
    params = payload.get("sampling_params") or {}
    wanted = params.get("max_tokens")
    if wanted is None:
        room = context_length - prompt
        if room >= 1:
            return {**payload, "sampling_params": {**params, "max_tokens": room}}
        wanted = 1
    if prompt + int(wanted) > context_length:
        field = "prompt" if prompt >= context_length else "sampling_params.max_tokens"
        raise DomainError(
            f"{field}: the prompt ({prompt} tokens) and max_tokens ({wanted}) are past this "
            f"sampler's context of {context_length} tokens (its context_length)",
            field=field,
        )
    return payload
