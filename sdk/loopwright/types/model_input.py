"""ModelInput: the token sequence (as chunks) that a datum or a sampling prompt carries."""

from __future__ import annotations

from collections.abc import Iterable

from ._base import RequestModel
from .chunks import EncodedTextChunk, ModelInputChunk

__all__ = ["ModelInput"]


class ModelInput(RequestModel):
    """A model's input: a list of chunks read in order."""

    chunks: list[ModelInputChunk]
    """The chunks, concatenated in order."""

    @classmethod
    def from_ints(cls, tokens: Iterable[int]) -> ModelInput:
        """A ModelInput of one token chunk."""
        return cls(chunks=[EncodedTextChunk(tokens=list(tokens))])

    @classmethod
    def empty(cls) -> ModelInput:
        """A ModelInput with no chunks."""
        return cls(chunks=[])

    def to_ints(self) -> list[int]:
        """All tokens in order; raises ValueError if any chunk is not a token chunk."""
        tokens: list[int] = []
        for chunk in self.chunks:
            if not isinstance(chunk, EncodedTextChunk):
                raise ValueError(f"to_ints needs token chunks only, found {chunk.type!r}")
            tokens.extend(chunk.tokens)
        return tokens

    @property
    def length(self) -> int:
        """Total context length in tokens."""
        return sum(chunk.length for chunk in self.chunks)

    def append(self, chunk: ModelInputChunk) -> ModelInput:
        """A new ModelInput with ``chunk`` added at the end."""
        return ModelInput(chunks=[*self.chunks, chunk])

    def append_int(self, token: int) -> ModelInput:
        """A new ModelInput with one more token, merged into a trailing token chunk."""
        if self.chunks and isinstance(last := self.chunks[-1], EncodedTextChunk):
            merged = EncodedTextChunk(tokens=[*last.tokens, token])
            return ModelInput(chunks=[*self.chunks[:-1], merged])
        return self.append(EncodedTextChunk(tokens=[token]))
