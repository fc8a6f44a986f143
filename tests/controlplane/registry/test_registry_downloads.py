"""Downloads of model package versions: the adapter loads in plain peft and the merged model in
plain transformers, both with the session's logprobs; options, keys, damaged objects, IAM,
other tenants, S3 and the SDK."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import peft
import pytest
import torch
from transformers import AutoModelForCausalLM

from controlplane.storage import s3_clients_close
from controlplane.tenants.services import storage_location_register
from controlplane.training_sessions.models import Checkpoint
from loopwright import ServiceClient
from tests.controlplane.registry.test_registry import TOKENS, Run, session, version_arn
from tests.engine.reference import token_logprobs
from tests.storage.s3_server import bucket, s3, s3_endpoint
from tests.support.callers import Person
from tests.support.sdk_transport import DjangoTransport

__all__ = ["bucket", "s3", "s3_endpoint"]  # fixtures: moto's S3 server, one per module

pytestmark = pytest.mark.django_db

GROUPS = "registry/model-package-groups"
BY_PATH = "registry/model-packages/download"
ADAPTER = ["adapter_config.json", "adapter_model.safetensors", "loopwright.json"]
OPTIMIZER = "optimizer.safetensors"


@dataclass
class Saved:
    """A run trained two steps: version 1 its state, version 2 merged sampler weights."""

    run: Run
    group: str
    state_path: str
    sampler_path: str
    logprobs: list[float]  # the session's forward on TOKENS

    def url(self, version: int) -> str:
        return f"{GROUPS}/{self.group}/versions/{version}/download"


def save_both(person: Person, runtime, **platform) -> Saved:
    run = Run(person, runtime, session(person, **platform))
    run.train()
    run.train()
    state = run.run("save_weights", path="state")["path"]
    sampler = run.run("save_weights_for_sampler", path="merged", merge_weights=True)["path"]
    return Saved(run, f"run-{run.id}", state, sampler, run.outputs())


@pytest.fixture
def saved(alice: Person, runtime) -> Saved:
    return save_both(alice, runtime)


@pytest.fixture
def scratch(settings, tmp_path) -> Path:
    """Where the control plane opens checkpoints for downloads."""
    settings.DOWNLOAD_SCRATCH_DIR = str(tmp_path / "downloads")
    return tmp_path / "downloads"


def body(response) -> bytes:
    """The whole streamed body (which ends the response)."""
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content)


def extract(response, dest: Path) -> Path:
    with tarfile.open(fileobj=io.BytesIO(body(response)), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    (folder,) = dest.iterdir()
    return folder


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def logprobs(model: torch.nn.Module) -> np.ndarray:
    with torch.no_grad():
        return token_logprobs(model, TOKENS, [(t + 1) % 256 for t in TOKENS]).numpy()


def base_model(runtime) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(runtime.host.materialized.path)


def assert_adapter_matches(folder: Path, saved: Saved, runtime) -> None:
    model = peft.PeftModel.from_pretrained(base_model(runtime), folder)
    np.testing.assert_allclose(logprobs(model), saved.logprobs, atol=1e-5)


def assert_merged_matches(folder: Path, saved: Saved) -> None:
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert not any("lora" in name for name, _ in model.named_parameters())
    np.testing.assert_allclose(logprobs(model), saved.logprobs, atol=1e-5)


def test_the_adapter_loads_in_plain_peft_with_the_sessions_logprobs(
    alice: Person, runtime, saved: Saved, scratch: Path, tmp_path: Path
) -> None:
    r = alice.get(saved.url(1), {"format": "adapter"})
    assert r["Content-Type"] == "application/gzip"
    assert r["Content-Disposition"] == f"attachment; filename={saved.group}-v1-adapter.tar.gz"
    described = alice.get(f"{GROUPS}/{saved.group}/versions/1").json()
    assert r["X-Loopwright-Manifest-Sha256"] == described["sha256"]
    folder = extract(r, tmp_path / "v1")
    assert folder.name == f"{saved.group}-v1-adapter" and names(folder) == ADAPTER
    assert_adapter_matches(folder, saved, runtime)
    assert list(scratch.iterdir()) == []

    # the optimizer state only when asked, and only of training state
    r = alice.get(saved.url(1), {"include_optimizer": "true"})
    assert r["Content-Disposition"].endswith(f"{saved.group}-v1-adapter-with-optimizer.tar.gz")
    assert names(extract(r, tmp_path / "v1-opt")) == sorted([*ADAPTER, OPTIMIZER])
    r = alice.get(BY_PATH, {"path": saved.sampler_path})
    assert r["Content-Disposition"].endswith(f"{saved.group}-v2-adapter.tar.gz")
    assert names(extract(r, tmp_path / "v2")) == ADAPTER
    r = alice.get(BY_PATH, {"path": saved.sampler_path, "include_optimizer": "true"})
    assert r.status_code == 400 and r.json()["field"] == "include_optimizer", r.content
    for params, field in [
        ({"format": "lora"}, "format"),
        ({"include_optimizer": "yes"}, "include_optimizer"),
    ]:
        r = alice.get(saved.url(1), params)
        assert r.status_code == 400 and r.json()["field"] == field, (params, r.content)
    assert alice.get(BY_PATH).json()["field"] == "path"

    # a client that goes away mid-download leaves no plaintext behind
    r = alice.get(saved.url(1), HTTP_ACCEPT="application/gzip")
    assert r.status_code == 200 and next(iter(r.streaming_content))
    assert len(list(scratch.iterdir())) == 1
    r.close()
    assert list(scratch.iterdir()) == []


def test_the_merged_model_loads_in_plain_transformers_with_the_sessions_logprobs(
    alice: Person, saved: Saved, scratch: Path, tmp_path: Path
) -> None:
    arn = version_arn(alice, saved.group, 2)
    r = alice.get(BY_PATH, {"path": arn, "format": "merged"})
    assert r["Content-Disposition"] == f"attachment; filename={saved.group}-v2-merged.tar.gz"
    folder = extract(r, tmp_path / "merged")
    assert "config.json" in names(folder) and "loopwright.json" not in names(folder)
    assert_merged_matches(folder, saved)
    assert list(scratch.iterdir()) == []

    # training state has no merged model, nor may a merged download carry optimizer state
    r = alice.get(saved.url(1), {"format": "merged"})
    assert r.status_code == 400 and r.json()["field"] == "format", r.content
    assert "merge_weights=True" in r.json()["detail"]
    r = alice.get(saved.url(2), {"format": "merged", "include_optimizer": "true"})
    assert r.status_code == 400 and r.json()["field"] == "include_optimizer"

    # an overwritten checkpoint no longer holds the older version's weights
    saved.run.run("save_weights", path="state", overwrite=True)
    r = alice.get(saved.url(1))
    assert r.status_code == 404 and "no weights" in r.json()["detail"], r.content


def test_a_key_that_is_not_enabled_stops_downloads(
    alice: Person, saved: Saved, scratch: Path
) -> None:
    key = alice.get(f"{GROUPS}/{saved.group}/versions/1").json()["kms_key_arn"]
    assert alice.post(f"kms/keys/{key}/disable").status_code == 200
    r = alice.get(saved.url(1))
    assert r.status_code == 400 and r.json()["field"] == "kms_key_arn", r.content
    assert key in r.json()["detail"] and "Disabled" in r.json()["detail"]
    assert not scratch.exists() or list(scratch.iterdir()) == []
    assert alice.post(f"kms/keys/{key}/enable").status_code == 200
    assert body(alice.get(saved.url(1)))


def test_a_damaged_stored_object_is_refused_by_name(
    alice: Person, saved: Saved, scratch: Path
) -> None:
    state = Checkpoint.objects.get(tinker_path=saved.state_path)
    merged = Checkpoint.objects.get(tinker_path=saved.sampler_path)
    for version, params, folder, name in [
        (1, {}, Path(state.storage_path), "adapter_model.safetensors"),
        (2, {"format": "merged"}, Path(merged.merged_path), "model.safetensors"),
    ]:
        path = folder / name
        original = path.read_bytes()
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # one bit, same size
        r = alice.get(saved.url(version), params)
        assert r.status_code == 409 and r.json()["code"] == "package_damaged", r.content
        assert path.as_uri() in r.json()["detail"] and "sha256" in r.json()["detail"]
        assert list(scratch.iterdir()) == []  # no archive, no plaintext
        path.unlink()
        r = alice.get(saved.url(version), params)
        assert r.status_code == 409 and "missing" in r.json()["detail"], r.content
        path.write_bytes(original)
        assert body(alice.get(saved.url(version), params))


def test_a_checkpoint_saved_before_manifests_is_read_from_its_folder(
    alice: Person, runtime, saved: Saved, tmp_path: Path
) -> None:
    Checkpoint.objects.filter(tinker_path=saved.sampler_path).update(manifest=None)
    folder = extract(alice.get(saved.url(2)), tmp_path / "a")
    assert names(folder) == ADAPTER
    assert_adapter_matches(folder, saved, runtime)
    assert_merged_matches(
        extract(alice.get(saved.url(2), {"format": "merged"}), tmp_path / "m"), saved
    )


def deny(alice: Person, who: str, action: str) -> None:
    document = {
        "Version": "2012-10-17",
        "Statement": [{"Sid": "NoDownloads", "Effect": "Deny", "Action": action, "Resource": "*"}],
    }
    r = alice.client.put(
        f"/api/v1/iam/users/{who}/policies/no-downloads", {"document": document}, format="json"
    )
    assert r.status_code == 200, r.content


def test_downloads_are_authorized_and_other_tenants_see_nothing(
    alice: Person, bob: Person, charlie: Person, saved: Saved
) -> None:
    arn = version_arn(alice, saved.group, 1)
    assert body(bob.get(saved.url(1)))  # a member may
    deny(alice, "bob@example.com", "registry:DownloadModelPackage")
    for r in (bob.get(saved.url(1)), bob.get(BY_PATH, {"path": saved.state_path})):
        assert r.status_code == 403, r.content
        assert "registry:DownloadModelPackage" in r.json()["detail"] and arn in r.json()["detail"]
    key = alice.get(f"{GROUPS}/{saved.group}/versions/1").json()["kms_key_arn"]
    deny(alice, "bob@example.com", "kms:Decrypt")
    r = bob.get(saved.url(1))
    assert r.status_code == 403 and "kms:Decrypt" in r.json()["detail"], r.content
    assert key in r.json()["detail"]

    for r in (
        charlie.get(saved.url(1)),
        charlie.get(BY_PATH, {"path": saved.state_path}),
        charlie.get(BY_PATH, {"path": arn}),
        charlie.get(BY_PATH, {"path": saved.sampler_path, "format": "merged"}),
    ):
        assert r.status_code == 404, r.content


def test_the_sdk_downloads_and_extracts_a_version(
    alice: Person, runtime, saved: Saved, tmp_path: Path
) -> None:
    service = ServiceClient(
        base_url="http://testserver", api_key=alice.key, transport=DjangoTransport()
    )
    dest = tmp_path / "downloaded"
    try:
        folder = service.download_model_package(saved.state_path, dest, include_optimizer=True)
        assert folder == dest / f"{saved.group}-v1-adapter"
        assert names(folder) == sorted([*ADAPTER, OPTIMIZER])
        assert_adapter_matches(folder, saved, runtime)
        arn = version_arn(alice, saved.group, 2)
        merged = service.download_model_package(arn, dest, format="merged")
        assert_merged_matches(merged, saved)
        assert names(dest) == sorted([folder.name, merged.name])  # no temporary files left
    finally:
        service.close()


@pytest.fixture
def s3_storage(alice: Person, s3_endpoint: str, bucket: str, settings, monkeypatch):
    """alice's account may use the bucket; the control plane and worker talk to moto's S3."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings.S3_ENDPOINT_URL = s3_endpoint
    storage_location_register(tenant=alice.tenant, uri=f"s3://{bucket}")
    yield f"s3://{bucket}/exports"
    s3_clients_close()


def test_a_version_stored_in_s3_downloads_the_same(
    alice: Person, runtime, s3_storage: str, s3, scratch: Path, tmp_path: Path
) -> None:
    saved = save_both(alice, runtime, s3_output_path=s3_storage)
    ckpt = Checkpoint.objects.get(tinker_path=saved.sampler_path)
    assert ckpt.storage_uri.startswith("s3://")
    assert_adapter_matches(extract(alice.get(saved.url(2)), tmp_path / "a"), saved, runtime)
    merged = extract(alice.get(saved.url(2), {"format": "merged"}), tmp_path / "m")
    assert_merged_matches(merged, saved)

    bucket_name, _, prefix = ckpt.storage_uri.removeprefix("s3://").partition("/")
    key = f"{prefix}/adapter_model.safetensors"
    s3.put_object(Bucket=bucket_name, Key=key, Body=b"not the weights")
    r = alice.get(saved.url(2))
    assert r.status_code == 409 and f"s3://{bucket_name}/{key}" in r.json()["detail"], r.content
    assert list(scratch.iterdir()) == []
