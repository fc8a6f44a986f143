"""Chat completions with ``image_url`` parts, in process, on the tiny LLaVA's worker: the usage
an answer reports counts each image as the tokens the base model registers for it (what billing
counts on the ``image_tokens`` meter), streamed or not; charlie never reaches alice's model."""

from __future__ import annotations

import base64
import io
import json

import pytest
from openai.types.chat import ChatCompletion
from PIL import Image

from controlplane.completions import services
from controlplane.metering.models import UsageRecord
from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import vlm_runtime
from tests.support.wire import open_session, result
from workers.engine.catalog import TINY_VLM, ModelCatalog

pytestmark = pytest.mark.django_db

PER_IMAGE = 16  # the tiny LLaVA's registered image tokens


@pytest.fixture(scope="module")
def vlm_catalog(tmp_path_factory) -> ModelCatalog:
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("vlm-cache"))
    catalog.materialize(TINY_VLM)
    return catalog


@pytest.fixture
def runtime(db, vlm_catalog, tmp_path):
    return vlm_runtime(vlm_catalog, tmp_path / "spill")


@pytest.fixture(autouse=True)
def drained(monkeypatch, runtime):
    """The worker runs what was submitted while the view waits (it is drained, in process)."""

    def wait(op, deadline):
        runtime.drain()
        op.refresh_from_db()
        return op

    monkeypatch.setattr(services, "operation_wait", wait)


@pytest.fixture
def model(alice, runtime) -> str:
    r = alice.post(
        "create_model",
        {
            "session_id": open_session(alice),
            "model_seq_id": 0,
            "base_model": TINY_VLM,
            "lora_config": {"rank": 4, "seed": 0},
        },
    )
    assert r.status_code == 200, r.content
    assert "error" not in result(alice, runtime, r.json())
    return r.json()["model_id"]


def data_uri(colour: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), colour).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def body(model: str, images: int, **extra) -> dict:
    parts = [{"type": "text", "text": "what?"}] + [
        {"type": "image_url", "image_url": {"url": data_uri((40 * k, 90, 200))}}
        for k in range(images)
    ]
    messages = [{"role": "user", "content": parts}]
    return {"model": model, "messages": messages, "max_tokens": 3, "seed": 1, **extra}


def metered(op_id: str) -> dict[str, int]:
    return dict(UsageRecord.objects.filter(operation_id=op_id).values_list("meter", "quantity"))


def sample_op() -> Operation:
    return Operation.objects.filter(kind="sample").latest("created_at")


def prompt_length(op: Operation) -> int:
    """The prompt as the worker took it: its tokens and each image's count."""
    return sum(
        len(c["tokens"])
        if c.get("type", "encoded_text") == "encoded_text"
        else c["expected_tokens"]
        for c in op.payload["prompt"]["chunks"]
    )


@pytest.mark.parametrize("images", [1, 2])
def test_usage_counts_each_image_as_its_registered_tokens(alice, model, images) -> None:
    text_only = alice.client.post("/v1/chat/completions", body(model, 0), format="json")
    assert text_only.status_code == 200, text_only.content
    text_tokens = ChatCompletion.model_validate(text_only.json()).usage.prompt_tokens
    assert text_tokens == prompt_length(sample_op())

    r = alice.client.post("/v1/chat/completions", body(model, images), format="json")
    assert r.status_code == 200, r.content
    usage = ChatCompletion.model_validate(r.json()).usage
    op = sample_op()
    # each image: the <image> token its part renders as, become the image's 16
    assert usage.prompt_tokens == prompt_length(op) == text_tokens + images * PER_IMAGE
    meters = metered(op.id)
    assert meters["image_tokens"] == images * PER_IMAGE
    assert usage.prompt_tokens == meters["prefill_tokens"] + meters["image_tokens"]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_the_streamed_usage_counts_them_too(alice, charlie, model) -> None:
    r = alice.client.post(
        "/v1/chat/completions",
        body(model, 1, stream=True, stream_options={"include_usage": True}),
        format="json",
    )
    assert r.status_code == 200, r.content
    events = b"".join(r.streaming_content).decode().split("\n\n")
    chunks = [json.loads(e[len("data: ") :]) for e in events if e.startswith("data: {")]
    (usage,) = [c["usage"] for c in chunks if c.get("usage")]
    meters = metered(sample_op().id)
    assert usage["prompt_tokens"] == meters["prefill_tokens"] + meters["image_tokens"]
    assert meters["image_tokens"] == PER_IMAGE
    # charlie (another tenant) cannot name alice's model
    other = charlie.client.post("/v1/chat/completions", body(model, 1), format="json")
    assert other.status_code == 404, other.content


def test_the_prompt_images_are_stored_sealed_and_a_retry_gets_the_same_answer(
    alice, charlie, model
) -> None:
    """The stored sample holds each image as a reference into its sealed envelope: neither the
    data URI's base64 nor the bytes are in the raw row; a retry with the same Idempotency-Key
    gets the same operation back (the digest is taken over the request as sent)."""
    from django.db import connection

    from controlplane.kms.envelope import is_sealed

    sent = body(model, 1)
    image = sent["messages"][0]["content"][1]["image_url"]["url"].split(",", 1)[1]
    r = alice.client.post(
        "/v1/chat/completions", sent, format="json", HTTP_IDEMPOTENCY_KEY="chat-img-1"
    )
    assert r.status_code == 200, r.content
    op = sample_op()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT payload, sealed_images FROM {Operation._meta.db_table} WHERE id = %s",
            [op.pk],
        )
        payload, sealed = cursor.fetchone()
    assert image[:40] not in str(payload)
    assert base64.b64decode(image)[:64] not in bytes(sealed)
    assert is_sealed(bytes(sealed))
    assert [c["data"] for c in op.payload["prompt"]["chunks"] if c.get("type") == "image"] == [
        {"sealed_image": 0}
    ]
    samples = Operation.objects.filter(kind="sample").count()
    again = alice.client.post(
        "/v1/chat/completions", sent, format="json", HTTP_IDEMPOTENCY_KEY="chat-img-1"
    )
    assert again.status_code == 200, again.content
    assert again.json()["choices"] == r.json()["choices"]
    assert Operation.objects.filter(kind="sample").count() == samples
    assert sample_op().pk == op.pk
    other = charlie.client.post(
        "/v1/chat/completions", sent, format="json", HTTP_IDEMPOTENCY_KEY="chat-img-1"
    )
    assert other.status_code == 404, other.content
