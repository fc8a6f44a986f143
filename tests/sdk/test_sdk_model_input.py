"""ModelInput and its chunks: the type tag, helpers and image encoding."""

import pytest
from pydantic import ValidationError

from loopwright.types import EncodedTextChunk, ImageChunk, ModelInput


def test_missing_chunk_type_means_encoded_text() -> None:
    mi = ModelInput.model_validate_json('{"chunks": [{"tokens": [1, 2]}, {"tokens": [3]}]}')
    assert all(isinstance(chunk, EncodedTextChunk) for chunk in mi.chunks)
    assert mi.to_ints() == [1, 2, 3]
    assert mi.model_dump()["chunks"][0] == {"tokens": [1, 2], "type": "encoded_text"}


def test_unknown_chunk_type_and_extra_fields_rejected() -> None:
    with pytest.raises(ValidationError):
        ModelInput.model_validate({"chunks": [{"type": "audio", "tokens": [1]}]})
    with pytest.raises(ValidationError):
        ModelInput.model_validate({"chunks": [{"tokens": [1], "text": "hi"}]})
    with pytest.raises(ValidationError):
        ModelInput.model_validate({"chunks": [], "extra": 1})


def test_helpers() -> None:
    mi = ModelInput.from_ints([5, 6])
    assert mi.length == 2
    assert ModelInput.empty().length == 0
    assert ModelInput.empty().append_int(1).to_ints() == [1]
    longer = mi.append_int(7)
    assert longer.to_ints() == [5, 6, 7]
    assert len(longer.chunks) == 1
    assert mi.to_ints() == [5, 6]  # the original is unchanged
    appended = mi.append(EncodedTextChunk(tokens=[8]))
    assert [c.length for c in appended.chunks] == [2, 1]


def test_image_chunk_base64_round_trip() -> None:
    mi = ModelInput(
        chunks=[
            EncodedTextChunk(tokens=[1]),
            ImageChunk(data=b"\x89PNG", format="png", expected_tokens=4),
        ]
    )
    wire = mi.model_dump(mode="json")
    assert wire["chunks"][1]["data"] == "iVBORw=="
    again = ModelInput.model_validate(wire)
    assert again == mi
    assert again.length == 5
    with pytest.raises(ValueError, match="token chunks only"):
        again.to_ints()


def test_image_length_needs_expected_tokens() -> None:
    chunk = ImageChunk(data=b"x", format="jpeg")
    with pytest.raises(ValueError, match="expected_tokens"):
        _ = chunk.length
