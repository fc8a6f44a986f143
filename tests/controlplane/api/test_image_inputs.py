"""Images in model inputs, checked on arrival against the base model's registration: JSON and
protobuf bodies, 400s naming the field and the limit, another tenant's 404."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from controlplane.fleet.models import BaseModel
from loopwright.proto.fwdbwd import encode_forward_backward
from loopwright.types import ForwardBackwardInput
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, fwdbwd, open_session

from .test_protobuf_wire import post_proto

PROTO = "application/x-protobuf"


def png(size: tuple[int, int] = (12, 10)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def image_datum(image: dict, image_tokens: int = 16) -> dict:
    n = 2 + image_tokens
    return {
        "model_input": {
            "chunks": [
                {"type": "encoded_text", "tokens": [1]},
                {"type": "image", "format": "png", **image},
                {"type": "encoded_text", "tokens": [2]},
            ]
        },
        "loss_fn_inputs": {"target_tokens": {"data": [0] * n, "dtype": "int64"}},
    }


@pytest.fixture
def model(alice, runtime) -> str:
    return create_model(alice, runtime, open_session(alice))


def refused(r, field: str) -> str:
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field, r.json()
    return r.json()["detail"]


AT = "forward_backward_input.data[0].model_input.chunks[1]"


def test_a_text_base_model_refuses_images_by_name(alice, model) -> None:
    r = alice.post("forward_backward", fwdbwd(model, 1, [image_datum({"data": png()})]))
    assert "takes no images" in refused(r, AT)


@pytest.mark.parametrize(
    ("image", "field", "words"),
    [
        ({"data": png(), "expected_tokens": 9}, f"{AT}.expected_tokens", ("9", "16")),
        ({"data": base64.b64encode(b"\x89PNG\r\n\x1a\nno").decode()}, f"{AT}.data", ("valid png",)),
        ({"data": "%%% not base64"}, f"{AT}.image.data", ("base64",)),  # the wire types' own
        ({"data": png((9000, 1))}, f"{AT}.data", ("9000×1", "8192")),
        ({"data": png(), "format": "jpeg"}, f"{AT}.data", ("valid jpeg",)),
        (
            {"data": png(), "override_dimensions": {"width": 5000, "height": 5000}},
            f"{AT}.override_dimensions",
            ("5000×5000",),
        ),
    ],
)
def test_bad_images_are_400_naming_the_field(alice, model, image, field, words) -> None:
    BaseModel.objects.filter(name=TINY).update(image_tokens=16)
    r = alice.post("forward_backward", fwdbwd(model, 1, [image_datum(image)]))
    detail = refused(r, field)
    assert all(w in detail for w in words), detail


def test_protobuf_images_are_checked_as_json_ones(alice, charlie, model) -> None:
    BaseModel.objects.filter(name=TINY).update(image_tokens=16)
    wrong = image_datum(
        {"data": png(), "expected_tokens": 3, "override_dimensions": {"width": 8, "height": 8}}
    )
    batch = ForwardBackwardInput.model_validate({"data": [wrong], "loss_fn": "cross_entropy"})
    body = encode_forward_backward(model, 1, batch)
    assert refused(post_proto(alice, body), f"{AT}.expected_tokens")
    assert post_proto(charlie, encode_forward_backward(model, 2, batch)).status_code == 404


def test_the_registered_count_is_written_into_an_image_without_one(alice, model) -> None:
    from controlplane.training_sessions.models import Operation

    BaseModel.objects.filter(name=TINY).update(image_tokens=16)
    r = alice.post("forward_backward", fwdbwd(model, 1, [image_datum({"data": png()})]))
    assert r.status_code == 200, r.content
    op = Operation.objects.get(id=r.json()["request_id"])
    chunk = op.payload["forward_backward_input"]["data"][0]["model_input"]["chunks"][1]
    assert chunk["expected_tokens"] == 16


def projector_model(person, session_id: str, seq: int = 0, **lora) -> object:
    body = {
        "session_id": session_id,
        "model_seq_id": seq,
        "base_model": TINY,
        "lora_config": {"rank": 4, "seed": 0, **lora},
    }
    return person.post("create_model", body)


def test_train_projector_needs_a_vision_language_base_model(alice, charlie, runtime) -> None:
    from controlplane.training_sessions.models import TrainingModel

    session = open_session(alice)
    r = projector_model(alice, session, train_projector=True)
    detail = refused(r, "lora_config.train_projector")
    assert TINY in detail and "text model" in detail
    assert not TrainingModel.objects.filter(session_id=session).exists()
    # another account's session is not found, whatever its lora_config
    assert projector_model(charlie, session, train_projector=True).status_code == 404
    assert projector_model(charlie, session).status_code == 404
    # a base model registered as taking images has a projector: the flag is kept
    BaseModel.objects.filter(name=TINY).update(image_tokens=16)
    r = projector_model(alice, session, train_projector=True)
    assert r.status_code == 200, r.content
    model_id = r.json()["model_id"]
    assert TrainingModel.objects.get(id=model_id).lora["train_projector"] is True
    info = alice.post("get_info", {"model_id": model_id})
    assert info.status_code == 200 and info.json()["lora"]["train_projector"] is True
    assert charlie.post("get_info", {"model_id": model_id}).status_code == 404
    # absent or false: not written, so a model and its requests read as they always did
    for seq, lora in ((1, {}), (2, {"train_projector": False})):
        r = projector_model(alice, session, seq, **lora)
        assert r.status_code == 200, r.content
        assert "train_projector" not in TrainingModel.objects.get(id=r.json()["model_id"]).lora
