"""save_weights_external and external_weights_urls (tinker SDK >= 0.30): time-limited links to
the registry's archives of a checkpoint, usable without a key; charlie gets 404."""

from __future__ import annotations

import io
import tarfile

import pytest
from rest_framework.test import APIClient

from controlplane.api import external_weights

from .wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


@pytest.fixture
def saved(alice, runtime, settings, tmp_path) -> tuple[str, str]:
    settings.DOWNLOAD_SCRATCH_DIR = str(tmp_path / "downloads")
    model = create_model(alice, runtime, open_session(alice))
    result(
        alice, runtime, alice.post("forward_backward", fwdbwd(model, 1, [datum([1, 2, 3])])).json()
    )
    r = alice.post("save_weights_external", {"model_id": model, "seq_id": 2, "path": "for-export"})
    assert r.status_code == 200, r.content
    answer = result(alice, runtime, r.json())
    assert answer["path"] == f"tinker://{model}/external_weights/for-export"
    return model, answer["path"]


def names(content: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(content), mode="r:gz") as tar:
        return {m.name.rsplit("/", 1)[-1] for m in tar.getmembers()}


def test_links_download_the_adapter_and_the_merged_model_without_a_key(alice, saved):
    model, _ = saved
    r = alice.get(
        f"training_runs/{model}/checkpoints/external_weights/for-export/external_weights_urls"
    )
    assert r.status_code == 200, r.content
    urls = r.json()["urls"]
    assert set(urls) == {"adapter.tar.gz", "merged.tar.gz"} and r.json()["expires"]
    anonymous = APIClient()
    adapter = anonymous.get(urls["adapter.tar.gz"].split("testserver", 1)[-1])
    assert adapter.status_code == 200
    assert "adapter_config.json" in names(b"".join(adapter.streaming_content))
    merged = anonymous.get(urls["merged.tar.gz"].split("testserver", 1)[-1])
    assert "config.json" in names(b"".join(merged.streaming_content))
    # the sampler path of the same checkpoint works too
    r = alice.get(
        f"training_runs/{model}/checkpoints/sampler_weights/for-export/external_weights_urls"
    )
    assert r.status_code == 200


def test_links_are_the_tenants_and_expire(alice, charlie, saved, monkeypatch):
    model, _ = saved
    path = f"training_runs/{model}/checkpoints/external_weights/for-export/external_weights_urls"
    assert charlie.get(path).status_code == 404
    assert (
        alice.get(f"training_runs/{model}/checkpoints/nope/x/external_weights_urls").status_code
        == 404
    )
    url = alice.get(path).json()["urls"]["adapter.tar.gz"].split("testserver", 1)[-1]
    anonymous = APIClient()
    assert anonymous.get(url[:-3] + "abc").status_code == 404  # not a link of ours
    monkeypatch.setattr(external_weights, "LINK_SECONDS", -1)
    r = anonymous.get(url)
    assert r.status_code == 410 and r.json()["code"] == "link_expired"


def test_age_encryption_is_refused_by_name(alice, runtime):
    model = create_model(alice, runtime, open_session(alice))
    r = alice.post(
        "save_weights_external",
        {"model_id": model, "seq_id": 1, "path": "x", "age_encryption_recipients": ["age1abc"]},
    )
    assert r.status_code == 400 and r.json()["field"] == "age_encryption_recipients"
