"""Training sessions for the in-process tests: a session named for the runtime, with its
model, made through the Tinker face (seed 0, so a Tinker model of the same seed matches it)."""

from __future__ import annotations

from controlplane.training_sessions.models import Session
from tests.controlplane.wire import create_model, open_session


def training_session(person, runtime, name: str) -> str:
    session_id = open_session(person)
    create_model(person, runtime, session_id)
    Session.objects.filter(id=session_id).update(name=name)
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
