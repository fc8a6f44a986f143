"""The request bodies of ``/v1/messages`` and ``/v1/messages/count_tokens``, as Anthropic's
Messages API defines them. What this service cannot do (images, documents, tools, thinking,
citations…) is a 400 naming the field, never ignored; an unknown field is a 400 too."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controlplane.errors import DomainError
from loopwright.types.limits import INT32_MAX

MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 1000  # characters, the engine's bound on a stop string
MAX_USER_ID = 256
UNSUPPORTED_BLOCKS = {
    "image": "image content is not supported: only text",
    "document": "document content is not supported: only text",
    "search_result": "search results are not supported: only text",
    "tool_use": "tool use is not supported",
    "tool_result": "tool results are not supported: tool use is not supported",
    "server_tool_use": "tool use is not supported",
    "web_search_tool_result": "tool results are not supported: tool use is not supported",
    "thinking": "extended thinking is not supported",
    "redacted_thinking": "extended thinking is not supported",
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class CacheControl(_Body):
    """Accepted and without effect: nothing is cached, and usage says so (0 cached tokens)."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(_Body):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None
    """Only none or an empty list: citations are not supported."""


class Message(_Body):
    role: Literal["user", "assistant"]
    content: str | list[TextBlock]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(block.text for block in self.content)


class Metadata(_Body):
    user_id: str | None = Field(None, max_length=MAX_USER_ID)
    """Accepted (an id of the end user, for your own records); it changes nothing here."""


class Conversation(_Body):
    """What both endpoints read: the model, the system prompt and the turns."""

    model: str = Field(min_length=1, max_length=2000)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    cache_control: CacheControl | None = None
    """Accepted and without effect: nothing is cached, and usage says so (0 cached tokens)."""
    speed: Literal["standard"] | None = None
    """Only ``standard``: there is no fast mode."""
    # what this service cannot do: refused when asked for (see _supported)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    output_config: dict[str, Any] | None = None
    """Only empty (or its fields null): output formats and effort levels are not supported."""

    @model_validator(mode="before")
    @classmethod
    def _blocks(cls, data: Any) -> Any:
        """A content block of a kind this service cannot read, refused by its place."""
        if isinstance(data, dict):
            if isinstance(data.get("system"), list):
                _refuse_blocks(data["system"], "system")
            messages = data.get("messages")
            for i, message in enumerate(messages if isinstance(messages, list) else []):
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, list):
                    _refuse_blocks(content, f"messages.{i}.content")
        return data

    @model_validator(mode="after")
    def _supported(self) -> Conversation:
        if self.tools:
            raise _unsupported("tools", "tool use is not supported")
        if self.tool_choice and self.tool_choice.get("type") != "none":
            raise _unsupported("tool_choice", "tool use is not supported")
        if self.thinking and self.thinking.get("type") != "disabled":
            raise _unsupported("thinking", "extended thinking is not supported")
        if self.mcp_servers:
            raise _unsupported("mcp_servers", "MCP servers are not supported")
        for name, value in (self.output_config or {}).items():
            if value is not None:
                raise _unsupported(f"output_config.{name}", "output options are not supported")
        for where, blocks in self._text_blocks():
            for j, block in enumerate(blocks):
                if block.citations:
                    raise _unsupported(f"{where}.{j}.citations", "citations are not supported")
        last = self.messages[-1]
        if last.role == "assistant" and last.text() != last.text().rstrip():
            raise _unsupported(
                f"messages.{len(self.messages) - 1}.content",
                "final assistant content cannot end with trailing whitespace",
            )
        return self

    def _text_blocks(self) -> list[tuple[str, list[TextBlock]]]:
        found = [("system", self.system)] if isinstance(self.system, list) else []
        for i, m in enumerate(self.messages):
            if isinstance(m.content, list):
                found.append((f"messages.{i}.content", m.content))
        return found

    @property
    def system_text(self) -> str | None:
        if self.system is None or isinstance(self.system, str):
            return self.system
        return "".join(block.text for block in self.system)

    @property
    def continues(self) -> bool:
        """Whether the last turn is the assistant's: the answer continues its text."""
        return self.messages[-1].role == "assistant"


class MessagesRequest(Conversation):
    max_tokens: int = Field(ge=1, le=INT32_MAX)
    """Most tokens to generate (required): the prompt and these must fit the model's context."""
    stop_sequences: list[str] | None = Field(None, max_length=MAX_STOP_SEQUENCES)
    """Text that ends the answer: it ends right before the first one generated."""
    temperature: float | None = Field(None, ge=0, le=1)
    """0 to 1 (default 1); 0 is greedy."""
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=INT32_MAX)
    """Sample from the k most likely tokens; 0 (like leaving it out) is no limit."""
    stream: bool | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    """Accepted: every request is served at the one (standard) tier."""
    container: Any = None
    context_management: Any = None
    diagnostics: Any = None
    inference_geo: Any = None

    @model_validator(mode="after")
    def _messages_supported(self) -> MessagesRequest:
        for name, why in (
            ("container", "containers are not supported"),
            ("context_management", "context management is not supported"),
            ("diagnostics", "diagnostics are not supported (nothing is cached)"),
            ("inference_geo", "the region cannot be chosen"),
        ):
            if getattr(self, name) is not None:
                raise _unsupported(name, why)
        for i, stop in enumerate(self.stop_sequences or []):
            if not stop or len(stop) > MAX_STOP_LENGTH:
                raise _unsupported(f"stop_sequences.{i}", f"1 to {MAX_STOP_LENGTH} characters")
        return self


class CountTokensRequest(Conversation):
    """The conversation whose input tokens to count, as ``/v1/messages`` would bill them."""


def _refuse_blocks(blocks: list, where: str) -> None:
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(kind, str) and kind != "text":
            why = UNSUPPORTED_BLOCKS.get(
                kind, f"content blocks of type {kind[:40]!r} are not supported"
            )
            raise _unsupported(f"{where}.{j}.type", why)


def _unsupported(field: str, message: str) -> DomainError:
    return DomainError(f"{field}: {message}", field=field)
