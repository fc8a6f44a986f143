"""Structured output on the tiny model: every finished answer satisfies its JSON schema
(checked by ``jsonschema``), regular expression or grammar, over many seeds; what cannot be
compiled is refused naming the field and the reason; a request whose grammar fails while
sampling fails alone."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from loopwright import structured_output
from loopwright.types import SamplingParams
from workers.engine.errors import InvalidInput
from workers.engine.sampler import SampleJob

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "age", "ok"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"enum": ["red", "green", "blue"]},
                "minItems": 1,
                "maxItems": 3,
            },
            "score": {"type": "number", "minimum": -1, "maximum": 1},
            "id": {"type": "string", "pattern": "^[a-z]{2}[0-9]{2}$"},
        },
        "required": ["tags", "id"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "kind": {"const": "point"},
            "xy": {
                "type": "array",
                "prefixItems": [{"type": "integer", "maximum": 9, "minimum": -9}] * 2,
                "items": False,
                "minItems": 2,
            },
            "label": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]},
        },
        "required": ["kind", "xy", "label"],
        "additionalProperties": False,
    },
]


def jobs_for(params: dict, seeds: range, n: int = 2) -> list[SampleJob]:
    return [
        SampleJob.from_wire([1, 2, 3], n, SamplingParams(**({"max_tokens": 200} | params), seed=s))
        for s in seeds
    ]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_answer_satisfies_its_schema_over_many_seeds(host, schema) -> None:
    results = host.sample(None, jobs_for({"json_schema": schema, "temperature": 1.3}, range(20)))
    answers = [s for r in results for s in r.sequences]
    assert len(answers) == 40
    for seq in answers:
        assert seq.stop_reason == "stop"  # the grammar was complete: no end-of-sequence needed
        text = host.tokenizer.decode(seq.tokens)
        jsonschema.validate(json.loads(text), schema)  # the JSON alone, nothing around it
    assert len({host.tokenizer.decode(s.tokens) for s in answers}) > 20


def test_a_json_object_is_any_object(host) -> None:
    schema = {"type": "object", "maxProperties": 2}
    results = host.sample(None, jobs_for({"json_schema": schema, "temperature": 0.7}, range(10)))
    for seq in (s for r in results for s in r.sequences):
        if seq.stop_reason == "stop":
            assert isinstance(json.loads(host.tokenizer.decode(seq.tokens)), dict)


def test_regex_answers_match_whole(host) -> None:
    pattern = r"(yes|no): [0-9]{1,3}(\.[0-9]+)?!"
    results = host.sample(None, jobs_for({"regex": pattern}, range(15)))
    for seq in (s for r in results for s in r.sequences):
        text = host.tokenizer.decode(seq.tokens)
        assert seq.stop_reason == "stop"
        assert re.fullmatch(pattern, text), text


def balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0 or ch not in "()ab":
            return False
    return depth == 0


def test_grammar_answers_are_sentences_of_the_grammar(host) -> None:
    """Balanced brackets around a's and b's: no regular expression says that."""
    grammar = 'start: item+\nitem: "a" | "b" | "(" item+ ")"\n'
    results = host.sample(None, jobs_for({"grammar": grammar, "max_tokens": 40}, range(15)))
    finished = 0
    for seq in (s for r in results for s in r.sequences):
        text = host.tokenizer.decode([t for t in seq.tokens if t != host.tokenizer.eos_token_id])
        if seq.stop_reason == "stop":
            finished += 1
            assert balanced(text), text
        else:  # cut by max_tokens: a prefix of a sentence
            assert text.count("(") >= text.count(")") and set(text) <= set("()ab")
    assert finished >= 5


def test_structure_and_processors_together_and_stop_after_completion(host) -> None:
    """With ``stop=[]`` (not even end-of-sequence) a completed grammar still stops."""
    schema = {
        "type": "object",
        "properties": {"a": {"enum": ["x", "yy"]}},
        "required": ["a"],
        "additionalProperties": False,
    }
    params = {"json_schema": schema, "stop": [], "repetition_penalty": 1.5, "min_p": 0.01}
    results = host.sample(None, jobs_for(params, range(5)))
    for seq in (s for r in results for s in r.sequences):
        assert seq.stop_reason == "stop"
        jsonschema.validate(json.loads(host.tokenizer.decode(seq.tokens)), schema)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"json_schema": {"type": "objectt"}}, "objectt"),
        ({"json_schema": {"type": "object", "if": {"type": "object"}}}, "if"),
        ({"regex": "a(b"}, "unclosed group"),
        ({"grammar": "start: missing\n"}, "missing"),
    ],
)
def test_what_cannot_be_compiled_is_refused_with_the_reason(host, params, reason) -> None:
    bad = jobs_for(params, range(1))[0]
    with pytest.raises(InvalidInput) as err:
        host.sampler.validate(bad)
    assert err.value.field == "sampling_params" and reason in err.value.message
    assert structured_output.compile_error(
        structured_output.Structure.of(SamplingParams(max_tokens=1, **params))
    )
    good = jobs_for({"regex": "[ab]+"}, range(1))
    out = host.sample_many([(None, [bad]), (None, good)])
    assert isinstance(out[0], InvalidInput) and not isinstance(out[1], Exception)


def test_a_grammar_that_fails_while_sampling_fails_its_request_alone(host, monkeypatch) -> None:
    """A limit reached mid-answer (here: few lexer states) fails that request with the reason;
    the request beside it in the same pass is unharmed."""
    monkeypatch.setitem(structured_output.LIMITS, "max_lexer_states", 40)
    hungry = SampleJob.from_wire(
        [1], 1, SamplingParams(max_tokens=60, seed=1, stop=[], regex="[ab]*a[ab]{12}c")
    )
    plain = SampleJob.from_wire([1], 2, SamplingParams(max_tokens=20, seed=2, stop=[]))
    host.sampler.validate(hungry)  # it compiles: the limit is reached only while sampling
    hungry_alone = host.sample_many([(None, [hungry])])[0]
    assert isinstance(hungry_alone, InvalidInput), hungry_alone
    assert "sampling_params" in str(hungry_alone)
    together = host.sample_many([(None, [hungry]), (None, [plain])])
    assert isinstance(together[0], InvalidInput)
    alone = host.sample(None, [plain])[0]
    assert [s.tokens for s in together[1][0].sequences] == [s.tokens for s in alone.sequences]
