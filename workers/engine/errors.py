"""Typed engine errors. Each names the offending field so the API can answer a precise 4xx."""

from __future__ import annotations


class EngineError(Exception):
    """Base class. ``category`` follows the wire protocol: ``user`` (bad input) or ``server``."""

    category = "server"


class InvalidInput(EngineError, ValueError):
    """The request is malformed; nothing was applied to the session."""

    category = "user"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnknownBaseModel(EngineError, LookupError):
    category = "user"

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown base model {name!r}; known: {', '.join(sorted(known))}")
        self.name = name


class UnknownAdapter(EngineError, LookupError):
    """No adapter (training model) with this id lives on the host."""

    category = "user"

    def __init__(self, model_id: str) -> None:
        super().__init__(f"no model {model_id!r} on this host")
        self.model_id = model_id


class CheckpointError(EngineError):
    """A checkpoint cannot be loaded: missing, corrupted, or of the wrong kind."""

    category = "user"
