"""OpenAI's ``response_format``: ``text``, ``json_object`` (the answer is a JSON object) and
``json_schema`` (the answer satisfies the schema). A schema llguidance cannot compile is a 400
naming ``response_format`` and saying why, before anything is submitted."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controlplane.errors import DomainError
from loopwright.structured_output import Structure, compile_error
from loopwright.types import SamplingParams
from loopwright.types.sampling_controls import JsonSchema

__all__ = ["ResponseFormat", "schema_of"]

ANY_OBJECT: dict[str, Any] = {"type": "object"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TextFormat(_Body):
    type: Literal["text"]


class JsonObjectFormat(_Body):
    type: Literal["json_object"]


class JsonSchemaSpec(_Body):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = Field(None, max_length=4096)
    json_schema: JsonSchema = Field(default_factory=dict, alias="schema")
    """The schema (``{}``: any JSON value)."""
    strict: bool | None = None
    """True: a keyword the engine does not implement is a 400. Otherwise such keywords are
    ignored, and an answer may not satisfy them."""


class JsonSchemaFormat(_Body):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec

    @model_validator(mode="after")
    def _compiles(self) -> JsonSchemaFormat:
        _check(schema_of(self))
        return self


ResponseFormat = Annotated[
    TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")
]


def schema_of(fmt: TextFormat | JsonObjectFormat | JsonSchemaFormat | None) -> dict | None:
    """The JSON schema the answer must satisfy, as ``SamplingParams.json_schema`` takes it."""
    if fmt is None or isinstance(fmt, TextFormat):
        return None
    if isinstance(fmt, JsonObjectFormat):
        return ANY_OBJECT
    schema = dict(fmt.json_schema.json_schema)
    if not fmt.json_schema.strict:  # llguidance's own option: skip what it does not implement
        options = schema.get("x-guidance")
        schema["x-guidance"] = {**(options if isinstance(options, dict) else {}), "lenient": True}
    return schema


def _check(schema: dict | None) -> None:
    structure = None if schema is None else Structure.of(SamplingParams(json_schema=schema))
    if structure is None:
        return
    error = compile_error(structure)
    if error is not None:
        raise DomainError(
            f"response_format: the schema cannot be used: {error}", field="response_format"
        )
