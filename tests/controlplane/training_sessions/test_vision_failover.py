"""Failover of a model on a vision-language base: its worker is declared dead after steps whose
inputs held images, another worker restores it and replays them, and the model ends with the
adapter of a run on one worker that never stopped, bit for bit; billed once per operation."""

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
from controlplane.metering.models import UsageRecord
from controlplane.training_sessions.models import Operation, Recovery, TrainingModel
from controlplane.training_sessions.services import failover
from tests.support.tiny_worker import vlm_runtime
from tests.support.wire import open_session, result
from workers.engine.catalog import TINY_VLM, ModelCatalog
from workers.runtime import WorkerRuntime

pytestmark = pytest.mark.django_db(transaction=True)

PER_IMAGE = 16  # the tiny LLaVA's image tokens per image
ADAM = {"learning_rate": 0.05}


@pytest.fixture(autouse=True)
def _postgres():
    # two in-process workers write at once (as in test_failover.py)
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers: run with DATABASE_URL=postgres://…")


@pytest.fixture(scope="module")
def vlm_catalog(tmp_path_factory) -> ModelCatalog:
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("vlm-cache"))
    catalog.materialize(TINY_VLM)
    return catalog


@pytest.fixture
def start(vlm_catalog, tmp_path):
    started: list[WorkerRuntime] = []

    def make(name: str) -> WorkerRuntime:
        runtime = vlm_runtime(vlm_catalog, tmp_path / f"spill-{name}", name=name)
        started.append(runtime)
        return runtime

    yield make
    for runtime in started:
        runtime.snapshots.flush(10)


def png(step: int) -> str:
    """A different drawing for every step (so a replay that lost an image would differ)."""
    image = Image.new("RGB", (36, 28), (255, 255, 255))
    ImageDraw.Draw(image).rectangle((2 + step, 3, 20 + step, 22), fill=(40 * step % 256, 90, 160))
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def image_datum(step: int) -> dict:
    before, after = [3 + step, 7], [11, 12 + step]
    n = len(before) + PER_IMAGE + len(after)
    weights = [0.0] * (len(before) + PER_IMAGE) + [1.0] * len(after)
    return {
        "model_input": {
            "chunks": [
                {"type": "encoded_text", "tokens": before},
                {"type": "image", "format": "png", "data": png(step)},
                {"type": "encoded_text", "tokens": after},
            ]
        },
        "loss_fn_inputs": {
            "target_tokens": {"data": [(5 * i + step) % 250 for i in range(n)], "dtype": "int64"},
            "weights": {"data": weights, "dtype": "float32"},
        },
    }


def new_model(person, runtime: WorkerRuntime) -> str:
    r = person.post(
        "create_model",
        {
            "session_id": open_session(person),
            "model_seq_id": 0,
            "base_model": TINY_VLM,
            "lora_config": {"rank": 4, "seed": 0},
        },
    )
    assert r.status_code == 200, r.content
    fut = r.json()
    assert result(person, runtime, fut) == {"model_id": fut["model_id"]}
    return fut["model_id"]


def steps(person, model_id: str, first: int, n: int) -> list[dict]:
    """``n`` forward_backward (on an image) + optim_step pairs from step ``first``."""
    futures = []
    for step in range(first, first + n):
        seq = 2 * step + 1
        body = {
            "model_id": model_id,
            "seq_id": seq,
            "forward_backward_input": {"data": [image_datum(step)], "loss_fn": "cross_entropy"},
        }
        futures.append(person.post("forward_backward", body))
        futures.append(
            person.post(
                "optim_step", {"model_id": model_id, "seq_id": seq + 1, "adam_params": ADAM}
            )
        )
    for f in futures:
        assert f.status_code == 200, f.content
    return [f.json() for f in futures]


def adapter(runtime: WorkerRuntime, model_id: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in runtime.host.pool.state_dict(model_id).items()}


def test_a_vlm_model_fails_over_and_replays_its_image_steps_exactly(alice, charlie, start) -> None:
    a = start("a")
    model_id = new_model(alice, a)
    done = steps(alice, model_id, 0, 2)
    for fut in done:
        assert "metrics" in result(alice, a, fut)

    b = start("b")
    Worker.objects.filter(pk=a.worker.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    failover.workers_declare_dead(by="test")
    assert TrainingModel.objects.get(pk=model_id).worker.name == "b"

    rest = steps(alice, model_id, 2, 1)
    for fut in rest:
        assert "metrics" in result(alice, b, fut)
    recovery = Recovery.objects.get(model_id=model_id)
    assert (recovery.outcome, recovery.from_worker, recovery.to_worker) == ("restored", "a", "b")
    assert recovery.replayed >= 4  # the two image steps and their optimizer steps, at least

    # the same operations on a worker that never stopped: the same adapter, bit for bit
    c = start("c")
    ref = new_model(alice, c)
    for fut in steps(alice, ref, 0, 3):
        assert "metrics" in result(alice, c, fut)
    moved, reference = adapter(b, model_id), adapter(c, ref)
    assert moved.keys() == reference.keys()
    assert all(torch.equal(moved[k], reference[k]) for k in moved)

    # billed once, replays nothing: each forward_backward its 4 text tokens and its image's
    # 16 on their own meter, an optimizer step nothing
    for fut in [*done, *rest]:
        op = Operation.objects.get(pk=fut["request_id"])
        billed = sorted(
            UsageRecord.objects.filter(operation_id=op.pk).values_list("meter", "quantity")
        )
        expected = [("image_tokens", PER_IMAGE), ("train_tokens", 4)]
        assert billed == (expected if op.kind == "forward_backward" else [])

    # another tenant sees none of it
    r = charlie.post("retrieve_future", {"request_id": rest[0]["request_id"]})
    assert r.status_code == 404
