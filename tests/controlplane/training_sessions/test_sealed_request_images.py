"""The images of a stored request are sealed with the tenant's KMS key, never in clear: the raw
operation row holds neither their base64 nor their bytes; the worker opens them and trains and
samples exactly as on the request sent (compared with the engine run on the clear request
directly), also when it replays them after a failover; a retry of the same request gets the
same operation; a disabled key is a 400 at submit (nothing stored); another tenant gets 404."""

from __future__ import annotations

import base64
import io
from datetime import timedelta

import pytest
import torch
from django.db import connection
from django.utils import timezone
from PIL import Image, ImageDraw

from controlplane.fleet.models import Worker
from controlplane.kms.envelope import is_sealed, read_header
from controlplane.kms.models import KmsKey
from controlplane.training_sessions.models import Operation, Recovery, TrainingModel
from controlplane.training_sessions.services import failover
from controlplane.training_sessions.services.request_images import payload_open
from tests.support.tiny_worker import tiny_runtime
from tests.support.wire import open_session, result
from workers.engine.catalog import TINY_VLM, ModelCatalog
from workers.engine.host import HostConfig, ModelHost
from workers.executor import engine_batch, run_samples

pytestmark = pytest.mark.django_db(transaction=True)

PER_IMAGE = 16  # the tiny LLaVA's image tokens per image
ADAM = {"learning_rate": 0.05}


def png(colour: tuple[int, int, int]) -> bytes:
    image = Image.new("RGB", (40, 30), (255, 255, 255))
    ImageDraw.Draw(image).ellipse((4, 4, 36, 26), fill=colour)
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


RED, BLUE = png((200, 0, 0)), png((0, 0, 200))


def chunks(image: bytes, after: list[int]) -> list[dict]:
    return [
        {"type": "encoded_text", "tokens": [1, 2]},
        {"type": "image", "format": "png", "data": base64.b64encode(image).decode()},
        {"type": "encoded_text", "tokens": after},
    ]


def image_datum(image: bytes, seq: int) -> dict:
    after = [(seq * 11 + j * 7) % 250 for j in range(5)]
    n = 2 + PER_IMAGE + len(after)
    return {
        "model_input": {"chunks": chunks(image, after)},
        "loss_fn_inputs": {
            "target_tokens": {"data": [(t + 3) % 250 for t in range(n)], "dtype": "int64"},
            "weights": {"data": [0.0] * (2 + PER_IMAGE) + [1.0] * len(after), "dtype": "float32"},
        },
    }


@pytest.fixture(autouse=True)
def _postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the raw row and two concurrent workers: run with DATABASE_URL=postgres://…")


@pytest.fixture(scope="module")
def vlm_catalog(tmp_path_factory) -> ModelCatalog:
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("vlm-cache"))
    catalog.materialize(TINY_VLM)
    return catalog


@pytest.fixture
def start(vlm_catalog, tmp_path):
    """An in-process worker named ``name`` serving the tiny LLaVA."""

    def make(name: str):
        host = ModelHost(TINY_VLM, HostConfig(spill_dir=tmp_path / name), vlm_catalog)
        return tiny_runtime(host, name=name, base_model=TINY_VLM)

    return make


def vlm_model(person, runtime, **platform) -> str:
    r = person.post(
        "create_model",
        {
            "session_id": open_session(person, **platform),
            "model_seq_id": 0,
            "base_model": TINY_VLM,
            "lora_config": {"rank": 4, "seed": 0},
        },
    )
    assert r.status_code == 200, r.content
    model_id = r.json()["model_id"]
    assert result(person, runtime, r.json()) == {"model_id": model_id}
    return model_id


def raw_row(request_id: str) -> str:
    """The operation's stored row as text, every column."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT t::text FROM {Operation._meta.db_table} t WHERE id = %s", [request_id]
        )
        return cursor.fetchone()[0]


def assert_sealed(request_id: str, *images: bytes) -> Operation:
    text = raw_row(request_id)
    op = Operation.objects.get(pk=request_id)
    sealed = bytes(op.sealed_images)
    for image in images:
        assert base64.b64encode(image).decode()[:40] not in text
        assert image[:64].hex() not in text  # the bytes, as bytea prints them
        assert image[:64] not in sealed
    assert is_sealed(sealed)
    header = read_header(sealed)
    tenant = op.tenant
    assert header.context["resource"] == f"operation {request_id}"
    assert header.key_arn == KmsKey.objects.get(tenant=tenant, is_default=True).arn
    return op


def test_a_training_request_is_stored_sealed_and_trains_exactly(alice, charlie, start) -> None:
    runtime = start("vlm0")
    model_id = vlm_model(alice, runtime)
    body = {
        "model_id": model_id,
        "seq_id": 1,
        "forward_input": {
            "data": [image_datum(RED, 1), image_datum(BLUE, 2)],
            "loss_fn": "cross_entropy",
        },
    }
    r = alice.post("forward", body)
    assert r.status_code == 200, r.content
    request_id = r.json()["request_id"]
    op = assert_sealed(request_id, RED, BLUE)
    stored = op.payload["forward_input"]["data"]
    assert stored[1]["model_input"]["chunks"][1]["data"] == {"sealed_image": 1}
    # the worker opens exactly what was sent (the expected count written in on arrival)
    opened = payload_open(op)["forward_input"]["data"]
    assert [d["model_input"]["chunks"][1]["data"] for d in opened] == [
        d["model_input"]["chunks"][1]["data"] for d in body["forward_input"]["data"]
    ]
    # a retry of the same request gets the same operation back
    again = alice.post("forward", body)
    assert again.status_code == 200, again.content
    assert again.json()["request_id"] == request_id
    assert Operation.objects.filter(model_id=model_id, seq_id=1).count() == 1
    # another tenant: 404, nothing stored for it
    assert charlie.post("forward", body).status_code == 404
    assert charlie.post("retrieve_future", {"request_id": request_id}).status_code == 404
    out = result(alice, runtime, r.json())
    assert "error" not in out, out
    # the engine run on the clear request directly: the same numbers
    reference = runtime.host.forward(model_id, engine_batch(body, "forward_input"))
    got = [o["logprobs"]["data"] for o in out["loss_fn_outputs"]]
    want = [o["logprobs"]["data"] for o in reference.model_dump(mode="json")["loss_fn_outputs"]]
    assert got == want


def test_a_sample_is_stored_sealed_and_draws_what_the_clear_prompt_draws(alice, start) -> None:
    runtime = start("vlm0")
    r = alice.post(
        "create_sampling_session",
        {"session_id": open_session(alice), "sampling_session_seq_id": 0, "base_model": TINY_VLM},
    )
    assert r.status_code == 200, r.content
    sampler = r.json()["sampling_session_id"]
    body = {
        "sampling_session_id": sampler,
        "seq_id": 1,
        "num_samples": 2,
        "prompt": {"chunks": chunks(BLUE, [3])},
        "sampling_params": {"max_tokens": 4, "seed": 5, "stop": []},
    }
    r = alice.post("asample", body)
    assert r.status_code == 200, r.content
    request_id = r.json()["request_id"]
    assert_sealed(request_id, BLUE)
    retry = alice.post("asample", body)
    assert retry.json()["request_id"] == request_id
    out = result(alice, runtime, r.json())
    assert "error" not in out, out
    # the engine sampling the clear prompt directly (the base weights, the same seed)
    (reference,) = run_samples(runtime.host, [(body, {})])
    assert reference.ok, reference.error
    assert [s["tokens"] for s in out["sequences"]] == [
        s["tokens"] for s in reference.result["sequences"]
    ]


def test_a_disabled_key_refuses_the_request_at_submit(alice, start) -> None:
    from controlplane.kms.services import default_key_for, key_disable

    runtime = start("vlm0")
    model_id = vlm_model(alice, runtime)
    key_disable(tenant=alice.tenant, actor="test", key_id=default_key_for(alice.tenant).arn)
    body = {
        "model_id": model_id,
        "seq_id": 1,
        "forward_input": {"data": [image_datum(RED, 1)], "loss_fn": "cross_entropy"},
    }
    r = alice.post("forward", body)
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "kms_key_arn", r.json()
    assert "Disabled" in r.json()["detail"]
    # the seq_id is taken by a failed operation, as any request refused on arrival: no image
    (op,) = Operation.objects.filter(model_id=model_id, seq_id=1)
    assert (op.status, op.error_category, op.payload) == ("failed", "user", {})
    assert base64.b64encode(RED).decode()[:40] not in raw_row(op.pk)


def test_a_model_trained_on_images_replays_exactly_after_a_failover(alice, start) -> None:
    a = start("a")
    model_id = vlm_model(alice, a)
    futures = []
    for seq in (1, 3):
        futures.append(
            alice.post(
                "forward_backward",
                {
                    "model_id": model_id,
                    "seq_id": seq,
                    "forward_backward_input": {
                        "data": [image_datum(RED if seq == 1 else BLUE, seq)],
                        "loss_fn": "cross_entropy",
                    },
                },
            )
        )
        futures.append(
            alice.post("optim_step", {"model_id": model_id, "seq_id": seq + 1, "adam_params": ADAM})
        )
    for fut in futures:
        assert fut.status_code == 200, fut.content
        assert "error" not in result(alice, a, fut.json())
    assert_sealed(futures[0].json()["request_id"], RED)
    trained = {k: v.clone() for k, v in a.host.pool.state_dict(model_id).items()}
    b = start("b")
    Worker.objects.filter(pk=a.worker.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    failover.workers_declare_dead(by="test")
    assert TrainingModel.objects.get(pk=model_id).worker.name == "b"
    b.beat()
    b.drain()
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.outcome, recovery.replayed) == ("restored", 5), recovery.__dict__
    replayed = b.host.pool.state_dict(model_id)
    assert trained.keys() == replayed.keys()
    assert all(torch.equal(trained[k], replayed[k]) for k in trained)
