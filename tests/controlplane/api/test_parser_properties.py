"""Properties of the request parsers, over generated inputs: the JSON parser takes every value
within the bounds unchanged and refuses every one outside them (whatever the nesting, whatever
the number's spelling) with a 400 naming where; the protobuf and zstd decoders answer any
bytes with a request or a 4xx, never anything else."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controlplane.api.json_body import MAX_DEPTH, BodyError, loads
from controlplane.api.protobuf_bodies import decode_forward_backward, decompressed
from controlplane.errors import DomainError
from loopwright.proto import pb
from loopwright.types import ForwardBackwardRequest, ForwardRequest

INT64 = st.integers(-(2**63), 2**63 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
SCALARS = st.none() | st.booleans() | INT64 | FINITE | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=30,
)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and a == b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@FAST
@given(VALUES)
def test_every_value_within_the_bounds_parses_unchanged(value) -> None:
    assert _same(loads(json.dumps(value).encode()), value)


@FAST
@given(
    VALUES,
    st.sampled_from(
        ["1e999", "-1e400", "1" + "0" * 320 + ".5", str(2**63), str(-(2**63) - 1), '"a\\u0000b"']
    ),
)
def test_a_bad_number_or_nul_anywhere_is_refused_with_where(value, bad) -> None:
    body = json.dumps({"keep": value, "here": [0, {"bad": "MARK"}]}).replace('"MARK"', bad)
    with pytest.raises(BodyError) as refused:
        loads(body.encode())
    assert refused.value.field == "here[1].bad"
    assert "0" * 50 not in refused.value.detail and len(refused.value.detail) < 300


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 400).map(lambda n: "9" * n or "0"),
    st.one_of(st.none(), st.integers(0, 30).map(lambda n: "5" * n or "0")),
    st.one_of(st.none(), st.integers(-420, 420)),
    st.booleans(),
)
def test_a_number_is_taken_if_and_only_if_it_is_finite_and_fits(mantissa, fraction, exp, neg):
    text = ("-" if neg else "") + mantissa + (f".{fraction}" if fraction else "")
    text += f"e{exp}" if exp is not None else ""
    is_int = fraction is None and exp is None
    value = int(text) if is_int else float(text)
    fits = -(2**63) <= value < 2**63 if is_int else math.isfinite(value)
    if is_int and len(mantissa) > 4000:
        fits = False
    try:
        parsed = loads(f"[{text}]".encode())
    except BodyError:
        assert not fits, text
    else:
        assert fits and parsed == [value], text


@pytest.mark.parametrize("depth", [1, 50, MAX_DEPTH])
def test_nesting_up_to_the_limit_is_taken(depth) -> None:
    assert loads(("[" * depth + "]" * depth).encode()) is not None
    assert loads(('{"a":' * depth + "1" + "}" * depth).encode()) is not None


@settings(max_examples=30, deadline=None)
@given(st.integers(MAX_DEPTH + 2, 100_000), st.booleans())
def test_deeper_nesting_is_a_400_however_deep(depth, objects) -> None:
    raw = '{"a":' * depth + "1" + "}" * depth if objects else "[" * depth + "]" * depth
    with pytest.raises(BodyError, match="nested more than 200 levels"):
        loads(raw.encode())


def _valid_or_refused(body: dict) -> None:
    model = ForwardRequest if "forward_input" in body else ForwardBackwardRequest
    with contextlib.suppress(ValidationError):  # a 400 naming the field
        model.model_validate(body)


@FAST
@given(st.binary(max_size=2000))
def test_any_bytes_are_a_request_or_a_4xx(raw) -> None:
    try:
        body = decode_forward_backward(raw)
    except DomainError as exc:
        assert 400 <= exc.status < 500
    else:
        _valid_or_refused(body)


DTYPES = st.sampled_from([*pb.DType.values(), 99])


@FAST
@given(
    model_id=TEXT | st.just("m\x00"),
    seq_id=st.integers(-(2**31), 2**31 - 1),
    tokens=st.binary(max_size=64),
    dtype=DTYPES,
    dense=st.binary(max_size=64),
    shape=st.lists(st.integers(0, 2**62), max_size=3),
    loss_fn=TEXT,
    config=st.dictionaries(TEXT, st.floats(), max_size=3),
    forward_only=st.booleans(),
)
def test_any_message_is_a_request_or_a_4xx(
    model_id, seq_id, tokens, dtype, dense, shape, loss_fn, config, forward_only
) -> None:
    msg = pb.ForwardBackwardRequest(
        model_id=model_id, seq_id=seq_id, loss_fn=loss_fn, forward_only=forward_only
    )
    msg.loss_fn_config.update(config)
    datum = msg.data.add()
    datum.model_input.add().encoded_text.tokens = tokens
    tensor = datum.loss_fn_inputs["target_tokens"]
    tensor.dtype, tensor.dense = dtype, dense
    tensor.shape.extend(shape)
    try:
        body = decode_forward_backward(msg.SerializeToString())
    except DomainError as exc:
        assert 400 <= exc.status < 500
    else:
        assert all(
            math.isfinite(v)
            for v in body[next(k for k in body if k.endswith("input"))]["data"][0][
                "loss_fn_inputs"
            ]["target_tokens"]["data"]
        )
        _valid_or_refused(body)


@FAST
@given(st.binary(max_size=512), st.booleans())
def test_any_zstd_body_decompresses_within_the_limit_or_is_a_4xx(raw, framed) -> None:
    body = zstandard.ZstdCompressor().compress(raw)[: len(raw) // 2 + 4] if framed else raw
    try:
        out = decompressed(body, "zstd", limit=256)
    except DomainError as exc:
        assert exc.status in (400, 413)
    else:
        assert len(out) <= 256
