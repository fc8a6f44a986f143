"""Training sessions for the in-process tests, made as the control plane's
``CreateTrainingSession`` makes them (a session of that name and its LoRA of rank 4 on the
tiny model), with the adapter's seed fixed at 0 so that a Tinker model of seed 0 matches it."""

from __future__ import annotations

from controlplane.sagemaker_sessions.services import training_session_create
from tests.support.tiny_worker import TINY


def training_session(person, runtime, name: str) -> str:
    training_session_create(
        tenant=person.tenant,
        actor=person.role_arn,
        name=name,
        base_model=TINY,
        lora={"rank": 4, "seed": 0},
        platform={"role_arn": person.role_arn},
        tags=None,
        base_model_arn="",
        output_path="",
    )
    runtime.drain()  # the model is made
    return name


def tokens_datum(tokens: list[int], weights: list[float] | None = None) -> dict:
    """A cross-entropy datum in the runtime's shape: each token predicts the next byte."""
    return {
        "modelInput": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "lossFnInputs": {
            "target_tokens": {"data": [(t + 1) % 256 for t in tokens], "dtype": "int64"},
            "weights": {"data": weights or [1.0] * len(tokens), "dtype": "float32"},
        },
    }


def prompt(tokens: list[int]) -> dict:
    return {"chunks": [{"type": "encoded_text", "tokens": tokens}]}


# The model asks for at least 512 new tokens; most bytes stop the tiny random model's text at
# once, which keeps the in-process samples short.
SHORT = {"maxTokens": 512, "stop": list("etaoinshrdlucmfwypvbgkjqxz ETAOINSHRDLU0123456789.,")}
