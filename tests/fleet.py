"""Workers registered or started in the fleet with no process behind them (nothing runs on
them: their operations stay queued), for tests of placement, the API and the pages."""

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


def started(name: str, base_model: str, *, capacity: int = 4, **extra):
    """Worker ``name`` of ``base_model`` started as a worker process starts it
    (``failover.worker_start``, at 127.0.0.1); ``extra`` adds to its registration. Its
    ``fleet.services.Registration``."""
    from controlplane.training_sessions.services import failover

    return failover.worker_start(
        by="test",
        **registration(name, base_model, capacity=capacity, address="127.0.0.1", **extra),
    )
