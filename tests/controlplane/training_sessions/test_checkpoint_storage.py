"""Checkpoints in storage: a session's s3_output_path puts them (sealed) in its bucket, else the
local folder; every object is checked against its manifest on load, so a damaged checkpoint fails
that load and leaves the model as it was; resuming from either store is exact."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from controlplane.kms.envelope import MAGIC
from controlplane.storage import manifest_digest, s3_clients_close
from controlplane.tenants.services import storage_location_register
from controlplane.training_sessions.models import Checkpoint
from controlplane.training_sessions.services.retention import checkpoints_expire
from tests.storage.s3_server import bucket, s3, s3_endpoint
from tests.support.wire import ModelRun, datum, open_session, result

__all__ = ["bucket", "s3", "s3_endpoint"]  # fixtures: moto's S3 server, one per module

pytestmark = pytest.mark.django_db

CHECKPOINT_FILES = {
    "adapter_config.json",
    "adapter_model.safetensors",
    "loopwright.json",
    "optimizer.safetensors",
}
PROBE = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.fixture
def scratch(runtime, tmp_path) -> Path:
    folder = tmp_path / "scratch"
    runtime.settings = dataclasses.replace(runtime.settings, scratch_dir=folder)
    return folder


@pytest.fixture(autouse=True)
def _alices_bucket(people, bucket) -> None:
    """The operator has set up the bucket for alice's account."""
    storage_location_register(tenant=people[0].tenant, uri=f"s3://{bucket}")


@pytest.fixture
def s3_storage(s3_endpoint: str, settings, monkeypatch):
    """The control plane and the worker talk to moto's S3 server (credentials: the AWS chain)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings.S3_ENDPOINT_URL = s3_endpoint
    settings.S3_REGION = "us-east-1"
    yield
    s3_clients_close()


class Run(ModelRun):
    """A training model that also trains and reads its outputs."""

    def step(self, i: int) -> float:
        """One training step on data of its own; returns the loss."""
        tokens = [(7 * i + k) % 200 for k in range(8)]
        data = {"data": [datum(tokens)], "loss_fn": "cross_entropy"}
        out = self.run("forward_backward", forward_backward_input=data)
        self.run("optim_step", adam_params={"learning_rate": 0.05})
        return out["metrics"]["loss:sum"]

    def outputs(self) -> list[float]:
        data = {"data": [datum(PROBE)], "loss_fn": "cross_entropy"}
        return self.run("forward", forward_input=data)["loss_fn_outputs"][0]["logprobs"]["data"]


def objects(s3: Any, bucket: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_a_session_with_s3_output_path_keeps_sealed_checkpoints_in_its_bucket(
    alice, runtime, scratch, s3_storage, s3, bucket, settings
) -> None:
    sid = open_session(alice, tags=[], s3_output_path=f"s3://{bucket}/runs/exp-1/")
    platform = alice.get(f"sessions/{sid}").json()["platform"]
    assert platform["s3_output_path"] == f"s3://{bucket}/runs/exp-1"
    run = Run(alice, runtime, sid)
    run.step(1)
    saved = run.run("save_weights", path="s1")["path"]

    ckpt = Checkpoint.objects.get(tinker_path=saved)
    prefix = f"runs/exp-1/{alice.tenant.id}/{run.id}/weights/s1"
    assert ckpt.storage_uri == ckpt.storage_path == f"s3://{bucket}/{prefix}"
    assert set(ckpt.manifest) == CHECKPOINT_FILES
    assert ckpt.sha256 == manifest_digest(ckpt.manifest)
    stored = objects(s3, bucket)
    assert set(stored) == {f"{prefix}/{name}" for name in CHECKPOINT_FILES}
    for name, info in ckpt.manifest.items():
        blob = stored[f"{prefix}/{name}"]
        assert blob.startswith(MAGIC) and b"__metadata__" not in blob
        assert info == {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    assert 0 < ckpt.size_bytes < sum(i["size"] for i in ckpt.manifest.values())  # plaintext
    assert not Path(settings.STORAGE_DIR).exists()  # nothing kept locally
    assert list(scratch.iterdir()) == []

    sampler = run.run("save_weights_for_sampler", path="sw", merge_weights=True)["path"]
    sw = Checkpoint.objects.get(tinker_path=sampler)
    assert sw.merged_path == sw.storage_uri + ".merged"
    merged_prefix = sw.merged_path.removeprefix(f"s3://{bucket}/") + "/"
    merged = {k: v for k, v in objects(s3, bucket).items() if k.startswith(merged_prefix)}
    assert merged and all(blob.startswith(MAGIC) for blob in merged.values())
    created = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "model_path": sampler},
    ).json()
    sample = {
        "sampling_session_id": created["sampling_session_id"],
        "seq_id": 1,
        "num_samples": 2,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 3, "seed": 1, "stop": []},
    }
    out = result(alice, runtime, alice.post("asample", sample).json())
    assert [len(s["tokens"]) for s in out["sequences"]] == [3, 3]
    assert list(scratch.iterdir()) == []


def test_expired_checkpoints_leave_the_bucket(
    alice, runtime, scratch, s3_storage, s3, bucket
) -> None:
    sid = open_session(alice, tags=[], s3_output_path=f"s3://{bucket}/ttl")
    run = Run(alice, runtime, sid)
    keep = run.run("save_weights", path="keep")["path"]
    brief = run.run("save_weights_for_sampler", path="brief", ttl_seconds=60, merge_weights=True)
    ckpt = Checkpoint.objects.get(tinker_path=brief["path"])
    later = ckpt.expires_at.replace(year=ckpt.expires_at.year + 1)
    assert checkpoints_expire(now=later) == [brief["path"]]
    left = {key.split("/")[4] for key in objects(s3, bucket)}
    assert left == {"keep"}
    assert Checkpoint.objects.filter(tinker_path=keep).exists()


@pytest.fixture(params=["s3", "local"])
def store(request) -> dict:
    """The session settings that pick the store: an s3_output_path, or none (local)."""
    if request.param == "local":
        return {}
    request.getfixturevalue("s3_storage")
    return {"s3_output_path": f"s3://{request.getfixturevalue('bucket')}/resume"}


def test_resuming_from_saved_state_equals_training_straight_through(
    alice, runtime, scratch, store
) -> None:
    straight = Run(alice, runtime, open_session(alice, tags=[]))
    losses = [straight.step(i) for i in range(1, 6)]

    first = Run(alice, runtime, open_session(alice, tags=[], **store))
    assert [first.step(i) for i in range(1, 4)] == losses[:3]
    saved = first.run("save_weights", path="three-steps")["path"]
    uri = Checkpoint.objects.get(tinker_path=saved).storage_uri
    assert uri.startswith("s3://" if store else "file:///")

    resumed = Run(alice, runtime, open_session(alice, tags=[]))  # a new session
    assert resumed.run("load_weights", path=saved, optimizer=True)["path"] == saved
    assert [resumed.step(i) for i in range(4, 6)] == losses[3:]
    assert resumed.outputs() == straight.outputs()  # bit for bit
    assert list(scratch.iterdir()) == []


def _s3_key(ckpt: Checkpoint, name: str) -> tuple[str, str]:
    bucket, _, prefix = ckpt.storage_uri.removeprefix("s3://").partition("/")
    return bucket, f"{prefix}/{name}"


def stored(ckpt: Checkpoint, name: str, s3: Any) -> bytes:
    """One stored object's bytes, read behind the store's back."""
    if s3 is None:
        return (Path(ckpt.storage_path) / name).read_bytes()
    bucket, key = _s3_key(ckpt, name)
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def replace(ckpt: Checkpoint, name: str, data: bytes | None, s3: Any) -> None:
    """Write (or, with None, remove) one stored object behind the store's back."""
    if s3 is None:
        path = Path(ckpt.storage_path) / name
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
        return
    bucket, key = _s3_key(ckpt, name)
    if data is None:
        s3.delete_object(Bucket=bucket, Key=key)
    else:
        s3.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.mark.parametrize("damage", ["altered", "missing"])
def test_a_damaged_checkpoint_fails_the_load_and_leaves_the_model_as_it_was(
    alice, runtime, scratch, store, damage, request
) -> None:
    s3 = request.getfixturevalue("s3") if store else None
    trained = Run(alice, runtime, open_session(alice, tags=[], **store))
    trained.step(1)
    saved = trained.run("save_weights", path="s1")["path"]
    expected = trained.outputs()
    ckpt = Checkpoint.objects.get(tinker_path=saved)

    target = Run(alice, runtime, open_session(alice, tags=[]))
    target.step(2)
    before = target.outputs()
    name = "adapter_model.safetensors"
    original = stored(ckpt, name, s3)
    flipped = original[:-1] + bytes([original[-1] ^ 1])  # one bit, same size
    replace(ckpt, name, flipped if damage == "altered" else None, s3)

    failed = result(
        alice, runtime, target.submit("load_weights", path=saved, optimizer=True).json()
    )
    assert failed["category"] == "user", failed
    assert f"loading {saved}" in failed["error"]
    assert f"{ckpt.storage_uri}/{name}" in failed["error"]
    assert ("missing" if damage == "missing" else "sha256") in failed["error"]
    assert target.outputs() == before  # nothing half-loaded
    assert list(scratch.iterdir()) == []

    replace(ckpt, name, original, s3)
    target.run("load_weights", path=saved, optimizer=True)
    assert target.outputs() == expected


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("bucket/prefix", "s3://bucket"),
        ("https://bucket.s3.amazonaws.com/x", "s3://bucket"),
        ("s3://", "names no bucket"),
        ("s3://Bad_Bucket/x", "3–63"),
        ("s3://ab", "3–63"),
        ("s3://10.0.0.1/x", "IP address"),
        ("s3://bucket//x", "no empty"),
        ("s3://bucket/a/../b", "no empty"),
        ("s3://bucket/" + "p" * 1020, "at most 1024"),
        ("", "s3://bucket"),
    ],
)
def test_bad_s3_output_paths_are_refused(alice, value: str, why: str) -> None:
    body = {"tags": [], "sdk_version": "test", "role_arn": alice.role_arn, "s3_output_path": value}
    r = alice.post("create_session", body)
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "s3_output_path"
    assert "s3_output_path" in r.json()["detail"] and why in r.json()["detail"]


def test_a_non_string_s3_output_path_is_refused(alice) -> None:
    body = {"tags": [], "sdk_version": "test", "role_arn": alice.role_arn, "s3_output_path": 12}
    r = alice.post("create_session", body)
    assert r.status_code == 400 and r.json()["field"] == "s3_output_path"


def test_another_tenant_cannot_load_or_sample_a_stored_checkpoint(
    alice, charlie, runtime, scratch, s3_storage, bucket
) -> None:
    sid = open_session(alice, tags=[], s3_output_path=f"s3://{bucket}/alice")
    run = Run(alice, runtime, sid)
    saved = run.run("save_weights", path="s1")["path"]
    sampler = run.run("save_weights_for_sampler", path="sw")["path"]

    theirs = Run(charlie, runtime, open_session(charlie, tags=[]))
    for optimizer in (True, False):
        r = theirs.submit("load_weights", path=saved, optimizer=optimizer)
        assert r.status_code == 404 and r.json()["field"] == "path"
    r = charlie.post(
        "create_sampling_session",
        {
            "session_id": open_session(charlie, tags=[]),
            "sampling_session_seq_id": 0,
            "model_path": sampler,
        },
    )
    assert r.status_code == 404


def test_an_s3_output_path_must_be_inside_a_location_of_the_account(alice, charlie, bucket) -> None:
    body = {"tags": [], "sdk_version": "t", "role_arn": charlie.role_arn}
    r = charlie.post("create_session", body | {"s3_output_path": f"s3://{bucket}/mine"})
    assert r.status_code == 400 and r.json()["field"] == "s3_output_path"
    assert "storage location" in r.json()["detail"]
    body["role_arn"] = alice.role_arn
    r = alice.post("create_session", body | {"s3_output_path": "s3://someone-elses-bucket/x"})
    assert r.status_code == 400 and r.json()["field"] == "s3_output_path"
    r = alice.post("create_session", body | {"s3_output_path": f"s3://{bucket}/deep/er"})
    assert r.status_code == 200, r.content
    listed = [loc["uri"] for loc in alice.get("storage/locations").json()["locations"]]
    assert listed == [f"s3://{bucket}"]
    assert charlie.get("storage/locations").json()["locations"] == []
