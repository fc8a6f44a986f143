"""Datums as the SDK (``loopwright.types``) builds them."""

from __future__ import annotations

from loopwright.types import Datum, ModelInput, TensorData


def next_token_datum(tokens: list[int]) -> Datum:
    """``tokens``, each trained (weight 1) to predict the next token id (``t + 1`` mod 256)."""
    return Datum(
        model_input=ModelInput.from_ints(tokens),
        loss_fn_inputs={
            "target_tokens": TensorData(data=[(t + 1) % 256 for t in tokens], dtype="int64"),
            "weights": TensorData(data=[1.0] * len(tokens), dtype="float32"),
        },
    )


def small_datum(**inputs: list[float]) -> Datum:
    """Tokens 1, 2, 3 with targets 2, 3, 4; ``inputs`` adds loss inputs."""
    return Datum(
        model_input=ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": [2, 3, 4], **inputs},
    )
