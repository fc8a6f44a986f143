"""Workers registered in the fleet with no process behind them (nothing runs on them: their
operations stay queued), for tests of placement, the API and the pages."""

from __future__ import annotations


def registration(name: str, base_model: str, *, capacity: int = 8, **extra) -> dict:
    """``fleet.services.worker_register``'s arguments for a worker ``name`` of ``base_model``
    (2,048 tokens of context, a GPU); ``extra`` adds or overrides."""
    return {
        "name": name,
        "queue": f"gpu.{name}",
        "base_model": base_model,
        "description": "a test model",
        "context_length": 2048,
        "chat_template": None,
        "tokenizer_files": {},
        "tokenizer_path": "",
        "capacity": capacity,
        "device": "cuda",
        **extra,
    }
