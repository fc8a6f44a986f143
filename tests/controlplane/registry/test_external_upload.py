"""Weights made elsewhere, uploaded (tinker 0.39's ``external_weights_upload_start`` and
``_finish``): the files of a PEFT adapter PUT to their signed links become a sampler checkpoint
that samples exactly as the adapter they came from; every wrong file is a 4xx naming it, the
links are the uploader's (forged: 404; expired: 410) and charlie gets 404 for alice's upload."""

from __future__ import annotations

import io
import json
import struct
import tarfile

import pytest
from rest_framework.test import APIClient

from controlplane.kms.envelope import MAGIC
from controlplane.registry import uploads
from controlplane.registry.models import ExternalUpload
from controlplane.storage import location
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


@pytest.fixture
def adapter(alice, runtime, settings, tmp_path) -> tuple[str, dict[str, bytes]]:
    """A trained rank-4 adapter's sampler checkpoint, and its PEFT files as downloaded."""
    settings.DOWNLOAD_SCRATCH_DIR = str(tmp_path / "downloads")
    model = create_model(alice, runtime, open_session(alice))
    result(
        alice, runtime, alice.post("forward_backward", fwdbwd(model, 1, [datum([1, 2, 3])])).json()
    )
    result(
        alice,
        runtime,
        alice.post(
            "optim_step", {"model_id": model, "seq_id": 2, "adam_params": {"learning_rate": 0.05}}
        ).json(),
    )
    r = alice.post("save_weights_for_sampler", {"model_id": model, "seq_id": 3, "path": "orig"})
    path = result(alice, runtime, r.json())["path"]
    links = alice.get(
        f"training_runs/{model}/checkpoints/sampler_weights/orig/external_weights_urls"
    ).json()["urls"]
    archive = APIClient().get(links["adapter.tar.gz"].split("testserver", 1)[-1])
    files = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(archive.streaming_content)), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if name in uploads.FILES:
                files[name] = tar.extractfile(member).read()
    assert set(files) == set(uploads.FILES)
    return path, files


def start(person, rank: int = 4) -> dict:
    r = person.post(
        "external_weights_upload_start",
        {"base_model": TINY, "lora_config": {"rank": rank}, "destination_project_id": "default"},
    )
    assert r.status_code == 200, r.content
    return r.json()


def put(url: str, content: bytes):
    return APIClient().put(
        url.split("testserver", 1)[-1], content, content_type="application/octet-stream"
    )


def sample(person, runtime, session: str, seq: int, model_path: str) -> dict:
    sampler = person.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": seq, "model_path": model_path},
    )
    assert sampler.status_code == 200, sampler.content
    r = person.post(
        "asample",
        {
            "sampling_session_id": sampler.json()["sampling_session_id"],
            "seq_id": 0,
            "num_samples": 2,
            "prompt": {"chunks": [{"tokens": [5, 6, 7]}]},
            "sampling_params": {"max_tokens": 6, "seed": 9, "stop": []},
        },
    )
    sequences = result(person, runtime, r.json())["sequences"]
    return [{k: v for k, v in s.items() if k != "sequence_id"} for s in sequences]


def test_an_uploaded_adapter_samples_as_the_one_it_came_from(alice, runtime, adapter):
    original, files = adapter
    started = start(alice)
    assert set(started["urls"]) == set(uploads.FILES) and started["expires"]
    for name, content in files.items():
        r = put(started["urls"][name], content)
        assert r.status_code == 200, r.content
        assert r.json() == {"file": name, "size_bytes": len(content)}
    r = alice.post("external_weights_upload_finish", {"upload_id": started["upload_id"]})
    assert r.status_code == 200, r.content
    uploaded = r.json()["tinker_path"]
    assert uploaded.startswith("tinker://") and "/sampler_weights/upload-" in uploaded
    # a retry gets the same checkpoint; its links take nothing more
    again = alice.post("external_weights_upload_finish", {"upload_id": started["upload_id"]})
    assert again.json()["tinker_path"] == uploaded
    assert (
        put(started["urls"]["adapter_config.json"], files["adapter_config.json"]).status_code == 409
    )
    # sealed where it is stored, and listed like any checkpoint
    upload = ExternalUpload.objects.get(pk=started["upload_id"])
    for name in uploads.FILES:
        stored = location(upload.storage_uri) + "/" + name
        with open(stored, "rb") as f:
            assert f.read(len(MAGIC)) == MAGIC
    info = alice.post("weights_info", {"tinker_path": uploaded}).json()
    assert info["base_model"] == TINY and info["lora_rank"] == 4
    session = open_session(alice)
    assert sample(alice, runtime, session, 0, uploaded) == sample(
        alice, runtime, session, 1, original
    )


def _safetensors(rank: int) -> bytes:
    header = {
        "x.lora_A.weight": {"dtype": "F32", "shape": [rank, 2], "data_offsets": [0, 8 * rank]}
    }
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * (8 * rank)


@pytest.mark.parametrize(
    ("name", "content", "status", "words"),
    [
        ("adapter_model.safetensors", b"not a safetensors file", 400, "not a safetensors file"),
        ("adapter_model.safetensors", _safetensors(8), 400, "rank 8, not 4"),
        ("adapter_model.safetensors", _safetensors(4)[:-3], 400, "do not fill the file"),
        ("adapter_config.json", b"[1, 2]", 400, "a JSON object"),
        ("adapter_config.json", json.dumps({"r": 16}).encode(), 400, "rank 4"),
    ],
    ids=["garbage", "wrong-rank", "truncated", "not-an-object", "config-rank"],
)
def test_each_wrong_file_is_refused_naming_it(alice, runtime, name, content, status, words):
    started = start(alice)
    r = put(started["urls"][name], content)
    assert r.status_code == status, r.content
    assert r.json()["field"] == name and words in r.json()["detail"]
    assert ExternalUpload.objects.get(pk=started["upload_id"]).files == {}


def test_finishing_needs_every_file_and_the_links_are_bounded(
    alice, charlie, runtime, settings, monkeypatch
):
    started = start(alice)
    assert put(started["urls"]["adapter_model.safetensors"], _safetensors(4)).status_code == 200
    r = alice.post("external_weights_upload_finish", {"upload_id": started["upload_id"]})
    assert r.status_code == 400 and "adapter_config.json" in r.json()["detail"]
    # charlie, another account, cannot finish it (nor see that it exists)
    r = charlie.post("external_weights_upload_finish", {"upload_id": started["upload_id"]})
    assert r.status_code == 404 and r.json()["field"] == "upload_id"
    url = started["urls"]["adapter_config.json"]
    assert put(url[:-3] + "abc", b"{}").status_code == 404  # not a link of ours
    settings.MAX_REQUEST_BYTES = 64
    r = put(started["urls"]["adapter_model.safetensors"], _safetensors(4) * 3)
    assert r.status_code == 413
    monkeypatch.setattr(uploads, "LINK_SECONDS", -1)
    r = put(url, b"{}")
    assert r.status_code == 410 and r.json()["code"] == "link_expired"


def test_an_upload_is_for_a_served_base_and_a_valid_shape(alice, runtime):
    r = alice.post(
        "external_weights_upload_start", {"base_model": "nope/x", "lora_config": {"rank": 4}}
    )
    assert r.status_code == 404 and r.json()["field"] == "base_model"
    r = alice.post(
        "external_weights_upload_start", {"base_model": TINY, "lora_config": {"rank": 999}}
    )
    assert r.status_code == 400 and r.json()["field"] == "lora_config.rank"
    r = alice.post(
        "external_weights_upload_start",
        {"base_model": TINY, "lora_config": {"rank": 4}, "destination_project_id": "other"},
    )
    assert r.status_code == 404 and r.json()["field"] == "destination_project_id"
