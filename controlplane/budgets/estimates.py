"""The most an operation can cost before it runs: its tokens per meter (a batch's exactly; a
sample's prompt and every token it may generate) and their price now."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from controlplane.fleet.models import BaseModel
from controlplane.metering.models import Meter
from controlplane.metering.pricing import ZERO, PriceBook
from controlplane.metering.tokens import batch_tokens, image_tokens, prompt_tokens
from controlplane.training_sessions.models import Operation

from .models import Budget


def bound(kind: str, payload: dict, base_model: str) -> dict[str, int]:
    """Tokens per meter the operation is billed at most (a sample without ``max_tokens`` may
    fill the base model's context); image tokens on their own meter, as they are billed."""
    tokens = _bound(kind, payload, base_model)
    images = image_tokens(kind, payload)
    if images:
        text_meter = {
            Operation.Kind.FORWARD_BACKWARD: Meter.TRAIN_TOKENS,
            Operation.Kind.FORWARD: Meter.FORWARD_TOKENS,
            Operation.Kind.SAMPLE: Meter.PREFILL_TOKENS,
        }[kind]
        tokens[text_meter] -= images
        tokens[Meter.IMAGE_TOKENS] = images
    return tokens


def _bound(kind: str, payload: dict, base_model: str) -> dict[str, int]:
    if kind == Operation.Kind.FORWARD_BACKWARD:
        return {Meter.TRAIN_TOKENS: batch_tokens(kind, payload) or 0}
    if kind == Operation.Kind.FORWARD:
        return {Meter.FORWARD_TOKENS: batch_tokens(kind, payload) or 0}
    if kind == Operation.Kind.SAMPLE:
        prompt = prompt_tokens(payload)
        params = payload.get("sampling_params") or {}
        per_sample = params.get("max_tokens")
        if not per_sample:
            context = (
                BaseModel.objects.filter(name=base_model)
                .values_list("context_length", flat=True)
                .first()
            )
            per_sample = max((context or 0) - prompt, 0)
        samples = int(payload.get("num_samples") or 1)
        return {Meter.PREFILL_TOKENS: prompt, Meter.SAMPLED_TOKENS: samples * int(per_sample)}
    return {}


def amount_for(
    budget: Budget, tokens: dict[str, int], *, base_model: str, book: PriceBook, at: datetime
) -> Decimal:
    """What ``tokens`` cost ``budget``: their count, or their price at ``at``."""
    if budget.unit == Budget.Unit.TOKENS:
        return Decimal(sum(tokens.values()))
    return sum(
        (book.cost(base_model, meter, at, quantity) for meter, quantity in tokens.items()), ZERO
    )
