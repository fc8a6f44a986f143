"""Recorded sampling with images in the prompt, on an in-process worker serving the tiny LLaVA:
the recording keeps the images sealed with the tenant's KMS key (the stored row holds no clear
image bytes, and counts the sealed images in its size), a ``stable_reinforce`` request citing it
is checked against the recorded prompt's images (the same image passes, another one is the
mismatch a token gives), another tenant gets the 404 an unknown sequence gets, and a key that
cannot seal leaves the sample answered but unrecorded."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone
from PIL import Image, ImageDraw

from controlplane.kms.envelope import is_sealed, read_header
from controlplane.kms.models import KmsKey
from controlplane.training_sessions.models import RecordedSample
from controlplane.training_sessions.services.recorded_images import IMAGE_POSITION, image_digest
from controlplane.training_sessions.services.recordings import recordings_read
from tests.support.tiny_worker import vlm_runtime
from tests.support.wire import open_session, result
from workers.engine.catalog import TINY_VLM, ModelCatalog

pytestmark = pytest.mark.django_db

PER_IMAGE = 16  # the tiny LLaVA's image tokens per image
BEFORE, AFTER = [1, 2], [3]
PROMPT_LENGTH = len(BEFORE) + PER_IMAGE + len(AFTER)
SAMPLED = 4


def png(colour: tuple[int, int, int]) -> bytes:
    image = Image.new("RGB", (40, 30), (255, 255, 255))
    ImageDraw.Draw(image).ellipse((4, 4, 36, 26), fill=colour)
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


RED, BLUE = png((200, 0, 0)), png((0, 0, 200))


def chunks(image: bytes, after: list[int], **declared) -> list[dict]:
    data = base64.b64encode(image).decode()
    return [
        {"type": "encoded_text", "tokens": BEFORE},
        {"type": "image", "format": "png", "data": data, **declared},
        {"type": "encoded_text", "tokens": after},
    ]


@pytest.fixture(scope="module")
def vlm_catalog(tmp_path_factory) -> ModelCatalog:
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("vlm-cache"))
    catalog.materialize(TINY_VLM)
    return catalog


@pytest.fixture
def runtime(db, vlm_catalog, tmp_path):
    """A worker runtime serving the tiny LLaVA (registering its 16 tokens per image)."""
    return vlm_runtime(vlm_catalog, tmp_path / "spill")


class VlmRun:
    """A training model on the tiny LLaVA in a new session of ``person``'s, and its sampler."""

    def __init__(self, person, runtime) -> None:
        self.person, self.runtime = person, runtime
        session = open_session(person)
        r = person.post(
            "create_model",
            {
                "session_id": session,
                "model_seq_id": 0,
                "base_model": TINY_VLM,
                "lora_config": {"rank": 4, "seed": 0},
            },
        )
        assert r.status_code == 200, r.content
        self.id = r.json()["model_id"]
        assert result(person, runtime, r.json()) == {"model_id": self.id}
        self.seq = 1
        saved = person.post(
            "save_weights_for_sampler",
            {"model_id": self.id, "seq_id": self.seq, "sampling_session_seq_id": 0},
        )
        assert saved.status_code == 200, saved.content
        self.sampler = result(person, runtime, saved.json())["sampling_session_id"]

    def sample(self, image: bytes, seq: int = 1) -> dict:
        r = self.person.post(
            "asample",
            {
                "sampling_session_id": self.sampler,
                "seq_id": seq,
                "num_samples": 2,
                "prompt": {"chunks": chunks(image, AFTER)},
                "sampling_params": {"max_tokens": SAMPLED, "seed": 5, "stop": []},
                "record_stability_info": True,
            },
        )
        assert r.status_code == 200, r.content
        out = result(self.person, self.runtime, r.json())
        assert "error" not in out, out
        return out

    def submit(self, data: list[dict]):
        self.seq += 1
        return self.person.post(
            "forward_backward",
            {
                "model_id": self.id,
                "seq_id": self.seq,
                "forward_backward_input": {"data": data, "loss_fn": "stable_reinforce"},
            },
        )


def datum_of(seq: dict, image: bytes) -> dict:
    """rl_loop's datum on an image prompt: the prompt and all but the last sampled token in,
    the targets shifted by one (prompt targets padded), spans in the expanded positions (so
    the image declares its token count, as a client computing lengths does)."""
    sampled, sid = seq["tokens"], seq["sequence_id"]
    ob = PROMPT_LENGTH - 1
    return {
        "model_input": {"chunks": chunks(image, AFTER + sampled[:-1], expected_tokens=PER_IMAGE)},
        "loss_fn_inputs": {
            "target_tokens": {"data": [0] * ob + sampled, "dtype": "int64"},
            "logprobs": {"data": [0.0] * ob + [-9.0] * len(sampled), "dtype": "float32"},
            "advantages": {"data": [0.0] * ob + [1.0] * len(sampled), "dtype": "float32"},
        },
        "model_input_spans": [
            {"type": "prompt_tokens", "sequence_id": sid, "length": PROMPT_LENGTH},
            {"type": "sampled_tokens", "sequence_id": sid, "length": len(sampled) - 1},
        ],
        "loss_fn_input_spans": [
            {"type": "prompt_tokens", "sequence_id": sid, "offset": 1, "length": ob},
            {"type": "sampled_tokens", "sequence_id": sid, "length": len(sampled)},
        ],
    }


def raw_row(recording_id: str) -> bytes:
    """Every column of the stored row as the database holds it, as one byte string."""
    table = connection.ops.quote_name(RecordedSample._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [recording_id])
        (row,) = cursor.fetchall()
    return b"".join(bytes(v) if isinstance(v, memoryview) else str(v).encode() for v in row)


def test_a_recorded_image_prompt_is_sealed_and_opens_again(alice, runtime) -> None:
    run = VlmRun(alice, runtime)
    out = run.sample(RED)
    (row,) = RecordedSample.objects.all()
    stored = raw_row(row.id)
    for clear in (RED, base64.b64encode(RED), RED[8:40], b"\x89PNG", b"IHDR"):
        assert clear not in stored
    sealed = bytes(row.images)
    assert is_sealed(sealed)
    header = read_header(sealed)
    key = KmsKey.objects.get(tenant=alice.tenant, is_default=True)
    assert header.key_arn == key.arn
    assert header.context["resource"] == f"recording {row.id}"
    assert len(sealed) > len(RED)
    # the prompt's positions: the image's 16 marked, the quota counting the sealed images
    prompt = np.frombuffer(bytes(row.prompt), "<i4").tolist()
    assert prompt == BEFORE + [IMAGE_POSITION] * PER_IMAGE + AFTER
    sizes = [len(bytes(getattr(row, f))) for f in ("prompt", "images", "tokens", "logprobs")]
    assert row.size_bytes == sum(sizes)
    assert sizes[2] == sizes[3] == 4 * 2 * SAMPLED
    # and it opens again: the recorded image is the one sampled on
    ids = {s["sequence_id"] for s in out["sequences"]}
    found = recordings_read(
        tenant=alice.tenant,
        session_id=row.session_id,
        sequence_ids=ids,
        now=timezone.now(),
        field="data",
    )
    assert set(found) == ids
    (image,) = found[out["sequences"][0]["sequence_id"]].images
    assert (image.offset, image.length) == (len(BEFORE), PER_IMAGE)
    assert image.digest == image_digest(chunks(RED, AFTER)[1])
    assert image.digest != image_digest(chunks(BLUE, AFTER)[1])


def test_stable_reinforce_checks_the_recorded_image(alice, charlie, runtime) -> None:
    run = VlmRun(alice, runtime)
    seqs = run.sample(RED)["sequences"]
    assert [len(s["tokens"]) for s in seqs] == [SAMPLED, SAMPLED]
    # the same image (and tokens): taken, training on the recorded logprobs
    r = run.submit([datum_of(seqs[0], RED), datum_of(seqs[1], RED)])
    assert r.status_code == 200, r.content
    out = result(alice, runtime, r.json())
    assert "error" not in out, out
    assert np.isfinite(out["metrics"]["loss:sum"])
    # another image at the recorded image's positions: the mismatch a token gives
    r = run.submit([datum_of(seqs[0], RED), datum_of(seqs[1], BLUE)])
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "forward_backward_input.data[1].model_input_spans[0]"
    detail = r.json()["detail"]
    assert "model_input differs from what sequence" in detail
    assert f"position {len(BEFORE)}: the image sent is not the recorded image" in detail
    # a token where the recording has an image
    text_only = datum_of(seqs[0], RED)
    text_only["model_input"]["chunks"] = [
        {
            "type": "encoded_text",
            "tokens": BEFORE + [7] * PER_IMAGE + AFTER + seqs[0]["tokens"][:-1],
        }
    ]
    r = run.submit([text_only])
    assert r.status_code == 400, r.content
    assert "position 2: 7 sent, an image recorded" in r.json()["detail"]
    # charlie (another tenant): alice's model is not found, and citing her sequence from a
    # model of his own is the answer an unknown sequence gets
    r = charlie.post(
        "forward_backward",
        {
            "model_id": run.id,
            "seq_id": 1,
            "forward_backward_input": {
                "data": [datum_of(seqs[0], RED)],
                "loss_fn": "stable_reinforce",
            },
        },
    )
    assert r.status_code == 404, r.content
    charlies = VlmRun(charlie, runtime)
    r = charlies.submit([datum_of(seqs[0], RED)])
    assert r.status_code == 404, r.content
    assert "not a recorded sequence of this session" in r.json()["detail"]


def test_images_its_key_cannot_open_fail_the_sample_unrecorded(alice, runtime) -> None:
    """The account's key is disabled after the sample was accepted: its images (sealed in the
    stored request) cannot be opened, so the sample fails as the user's naming the key, and
    nothing is recorded (its images are never stored unsealed)."""
    from controlplane.kms.services import default_key_for, key_disable

    r = alice.post(
        "create_sampling_session",
        {"session_id": open_session(alice), "sampling_session_seq_id": 0, "base_model": TINY_VLM},
    )
    assert r.status_code == 200, r.content
    r = alice.post(
        "asample",
        {
            "sampling_session_id": r.json()["sampling_session_id"],
            "seq_id": 1,
            "num_samples": 1,
            "prompt": {"chunks": chunks(RED, AFTER)},
            "sampling_params": {"max_tokens": SAMPLED, "seed": 5, "stop": []},
            "record_stability_info": True,
        },
    )
    assert r.status_code == 200, r.content
    key = default_key_for(alice.tenant)
    key_disable(tenant=alice.tenant, actor="test", key_id=key.arn)
    out = result(alice, runtime, r.json())
    assert out.get("category") == "user", out
    assert "cannot be opened" in out["error"] and key.arn in out["error"], out
    assert not RecordedSample.objects.exists()
