"""Checkpoints at rest are sealed with the session's KMS key (or the tenant's default key): only
ciphertext in storage, exact weights back on load, and a key that is not Enabled stops both."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.housekeeping.janitor import sweep
from controlplane.kms import providers
from controlplane.kms.envelope import is_sealed, open_file, read_header
from controlplane.kms.models import KmsKey
from controlplane.kms.selectors import key_ref_by_arn
from controlplane.training_sessions.models import Checkpoint
from tests.kms import aws_server
from tests.support.wire import ModelRun, datum, open_session, result

pytestmark = pytest.mark.django_db

moto_kms = aws_server.endpoint  # moto's KMS server, one per module
TOKENS = [3, 1, 4, 1, 5, 9, 2, 6]
CHECKPOINT_FILES = {
    "adapter_config.json",
    "adapter_model.safetensors",
    "loopwright.json",
    "optimizer.safetensors",
}


@pytest.fixture
def scratch(runtime, tmp_path) -> Path:
    """Where the worker keeps plaintext checkpoints while it works on them."""
    folder = tmp_path / "scratch"
    runtime.settings = dataclasses.replace(runtime.settings, scratch_dir=folder)
    return folder


class Run(ModelRun):
    """A training model that also trains and reads its outputs."""

    def train(self) -> None:
        data = {"data": [datum(TOKENS)], "loss_fn": "cross_entropy"}
        assert "metrics" in self.run("forward_backward", forward_backward_input=data)
        assert "metrics" in self.run("optim_step", adam_params={"learning_rate": 0.05})

    def outputs(self) -> list[float]:
        out = self.run(
            "forward", forward_input={"data": [datum(TOKENS)], "loss_fn": "cross_entropy"}
        )
        return out["loss_fn_outputs"][0]["logprobs"]["data"]

    def save(self, name: str, **body) -> dict:
        return self.run("save_weights", path=name, **body)

    def load(self, path: str, optimizer: bool = True) -> dict:
        return self.run("load_weights", path=path, optimizer=optimizer)


def session(person, kms_key_arn: str | None = None):
    body = {"tags": [], "sdk_version": "test", "role_arn": person.role_arn}
    if kms_key_arn is not None:
        body["kms_key_arn"] = kms_key_arn
    return person.post("create_session", body)


def new_key(person, **body) -> dict:
    r = person.post("kms/keys", body)
    assert r.status_code == 201, r.content
    return r.json()


def key_action(person, key: dict, action: str) -> dict:
    r = person.post(f"kms/keys/{key['key_id']}/{action}")
    assert r.status_code == 200, r.content
    return r.json()


def folder_of(path: str) -> Path:
    return Path(Checkpoint.objects.get(tinker_path=path).storage_path)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {f.relative_to(folder).as_posix(): f.read_bytes() for f in folder.rglob("*")}


def opened(person, folder: Path, path: str, name: str, out: Path) -> bytes:
    """A sealed file's plaintext, opened as the worker opens it."""
    header = read_header(folder / name)
    open_file(
        folder / name,
        out,
        key_lookup=lambda arn: key_ref_by_arn(tenant_id=person.tenant.id, arn=arn),
        provider_for_key=providers.provider,
        expected_context={"tenant": person.tenant.account_id, "resource": path, "file": name},
    )
    assert header.key_arn
    return out.read_bytes()


def assert_sealed(folder: Path, key_arn: str, path: str, tenant) -> None:
    files = [f for f in folder.rglob("*") if f.is_file()]
    assert files
    for f in files:
        blob = f.read_bytes()
        assert is_sealed(f)
        assert b"__metadata__" not in blob and b"base_model" not in blob
        assert b"lora_" not in blob and b"target_modules" not in blob
        header = read_header(f)
        assert header.key_arn == key_arn
        assert dict(header.context) == {
            "tenant": tenant.account_id,
            "resource": path,
            "file": f.relative_to(folder).as_posix(),
        }


def test_saved_files_are_sealed_and_loading_restores_the_weights(
    alice, runtime, scratch, tmp_path
) -> None:
    sid = open_session(alice, tags=[])
    trained = Run(alice, runtime, sid)
    trained.train()
    expected = trained.outputs()
    saved = trained.save("s1")["path"]

    default = KmsKey.objects.get(tenant=alice.tenant, is_default=True)
    assert default.alias == "alias/loopwright/checkpoints" and default.provider == "local"
    folder = folder_of(saved)
    assert {f.name for f in folder.iterdir()} == CHECKPOINT_FILES
    assert_sealed(folder, default.arn, saved, alice.tenant)
    ckpt = Checkpoint.objects.get(tinker_path=saved)
    assert ckpt.kms_key_arn == default.arn
    adapter = opened(alice, folder, saved, "adapter_model.safetensors", tmp_path / "a")
    assert b"__metadata__" in adapter  # the plaintext is a safetensors file
    plain_total = sum(
        len(opened(alice, folder, saved, f.name, tmp_path / f.name)) for f in folder.iterdir()
    )
    assert ckpt.size_bytes == plain_total
    listed = alice.get(f"training_runs/{trained.id}/checkpoints").json()["checkpoints"]
    assert listed[0]["size_bytes"] == plain_total

    fresh = Run(alice, runtime, sid, seq=1)
    assert fresh.outputs() != pytest.approx(expected)
    assert fresh.load(saved)["path"] == saved
    assert fresh.outputs() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    sampler_only = Run(alice, runtime, sid, seq=2)
    sampler_only.load(saved, optimizer=False)
    assert sampler_only.outputs() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert list(scratch.iterdir()) == []  # no plaintext left behind


def test_the_sessions_key_seals_its_checkpoints(alice, runtime, scratch) -> None:
    key = new_key(alice, alias="alias/team/ckpt")
    sid = open_session(
        alice, tags=[], kms_key_arn="alias/team/ckpt"
    )  # an alias or id is stored as the ARN
    assert alice.get(f"sessions/{sid}").json()["platform"]["kms_key_arn"] == key["arn"]
    run = Run(alice, runtime, sid)
    saved = run.save("mine")["path"]
    assert_sealed(folder_of(saved), key["arn"], saved, alice.tenant)
    assert not KmsKey.objects.filter(tenant=alice.tenant, is_default=True).exists()

    sampler = run.run("save_weights_for_sampler", path="for-sampling", merge_weights=True)
    sampled_path = sampler["path"]
    sealed = folder_of(sampled_path)
    assert_sealed(sealed, key["arn"], sampled_path, alice.tenant)
    merged = Path(Checkpoint.objects.get(tinker_path=sampled_path).merged_path)
    assert merged.is_dir() and any(merged.iterdir())
    for f in merged.rglob("*"):
        if f.is_file():
            header = read_header(f)
            assert header.key_arn == key["arn"]
            assert header.context["file"] == "merged/" + f.relative_to(merged).as_posix()
    created = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "model_path": sampled_path},
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
    ephemeral = run.run("save_weights_for_sampler", sampling_session_seq_id=1)
    eph = {**sample, "sampling_session_id": ephemeral["sampling_session_id"]}
    assert len(result(alice, runtime, alice.post("asample", eph).json())["sequences"]) == 2
    assert list(scratch.iterdir()) == []


def test_a_key_that_is_not_enabled_stops_saving_and_loading(alice, runtime, scratch) -> None:
    key = new_key(alice)
    sid = open_session(alice, tags=[], kms_key_arn=key["arn"])
    run = Run(alice, runtime, sid)
    run.train()
    saved = run.save("s1")["path"]
    sampler_path = run.run("save_weights_for_sampler", path="sw")["path"]
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "model_path": sampler_path},
    ).json()["sampling_session_id"]
    before = snapshot(folder_of(saved))
    expected = run.outputs()

    key_action(alice, key, "disable")
    refused = run.submit("save_weights", path="s2")
    assert refused.status_code == 400
    assert key["arn"] in refused.json()["detail"] and "Disabled" in refused.json()["detail"]
    assert refused.json()["field"] == "kms_key_arn"
    for body in ({"path": "s1", "overwrite": True}, {}):
        assert run.submit("save_weights", **body).status_code == 400
    r = run.submit("load_weights", path=saved, optimizer=True)
    assert r.status_code == 400 and r.json()["field"] == "path"
    assert key["arn"] in r.json()["detail"] and "Disabled" in r.json()["detail"]
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 1, "model_path": sampler_path},
    )
    assert r.status_code == 400 and "Disabled" in r.json()["detail"]
    r = alice.post(
        "asample",
        {
            "sampling_session_id": sampler,
            "seq_id": 1,
            "prompt": {"chunks": [{"tokens": [5]}]},
            "sampling_params": {"max_tokens": 2},
        },
    )
    assert r.status_code == 400 and "Disabled" in r.json()["detail"]
    assert run.outputs() == pytest.approx(expected)  # the refused requests took their seq_ids
    assert snapshot(folder_of(saved)) == before
    assert not Checkpoint.objects.filter(tinker_path__endswith="/s2").exists()

    key_action(alice, key, "enable")
    again = run.save("s2")["path"]
    assert_sealed(folder_of(again), key["arn"], again, alice.tenant)
    run.load(saved)
    assert run.outputs() == pytest.approx(expected, rel=1e-6, abs=1e-6)

    alice.post(f"kms/keys/{key['key_id']}/schedule-deletion", {"pending_window_days": 7})
    r = run.submit("load_weights", path=saved, optimizer=True)
    assert r.status_code == 400 and "PendingDeletion" in r.json()["detail"]
    assert list(scratch.iterdir()) == []


def test_a_key_disabled_after_submit_fails_only_that_operation(alice, runtime, scratch) -> None:
    key = new_key(alice)
    sid = open_session(alice, tags=[], kms_key_arn=key["key_id"])
    run = Run(alice, runtime, sid)
    run.train()
    saved = run.save("s1")["path"]
    before = snapshot(folder_of(saved))
    expected = run.outputs()

    overwrite = run.submit("save_weights", path="s1", overwrite=True).json()
    load = run.submit("load_weights", path=saved, optimizer=True).json()
    key_action(alice, key, "disable")
    for fut in (overwrite, load):
        failed = result(alice, runtime, fut)
        assert failed["category"] == "user", failed
        assert f"key {key['arn']} is Disabled" in failed["error"]
        assert saved in failed["error"]
    assert snapshot(folder_of(saved)) == before  # nothing lost
    assert run.outputs() == pytest.approx(expected)  # the session is still usable

    key_action(alice, key, "enable")
    run.save("s1", overwrite=True)
    run.load(saved)
    assert run.outputs() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert list(scratch.iterdir()) == []


def test_rotation_keeps_older_checkpoints_loadable(alice, runtime, scratch) -> None:
    key = new_key(alice)
    sid = open_session(alice, tags=[], kms_key_arn=key["arn"])
    run = Run(alice, runtime, sid)
    run.train()
    first, first_out = run.save("v1")["path"], run.outputs()
    key_action(alice, key, "rotate")
    run.train()
    second, second_out = run.save("v2")["path"], run.outputs()
    assert {read_header(f).key_version for f in folder_of(first).iterdir()} == {1}
    assert {read_header(f).key_version for f in folder_of(second).iterdir()} == {2}
    assert first_out != pytest.approx(second_out)
    run.load(first)
    assert run.outputs() == pytest.approx(first_out, rel=1e-6, abs=1e-6)
    run.load(second)
    assert run.outputs() == pytest.approx(second_out, rel=1e-6, abs=1e-6)


def test_a_session_cannot_name_another_tenants_key(alice, charlie) -> None:
    theirs = new_key(charlie, alias="alias/theirs")
    for ref in (theirs["arn"], theirs["key_id"], "arn:loopwright:kms::1:key/x", "alias/theirs"):
        r = session(alice, ref)
        assert r.status_code == 404, ref
        assert r.json()["field"] == "kms_key_arn"
    mine = new_key(alice)
    key_action(alice, mine, "disable")
    r = session(alice, mine["arn"])
    assert r.status_code == 400 and r.json()["field"] == "kms_key_arn"
    assert "Disabled" in r.json()["detail"] and mine["arn"] in r.json()["detail"]
    alice.post(f"kms/keys/{mine['key_id']}/schedule-deletion", {"pending_window_days": 7})
    r = session(alice, mine["arn"])
    assert r.status_code == 400 and "PendingDeletion" in r.json()["detail"]


def test_checkpoints_of_a_deleted_key_cannot_be_opened(alice, runtime, scratch) -> None:
    key = new_key(alice)
    sid = open_session(alice, tags=[], kms_key_arn=key["arn"])
    run = Run(alice, runtime, sid)
    saved = run.save("s1")["path"]
    alice.post(f"kms/keys/{key['key_id']}/schedule-deletion", {"pending_window_days": 7})
    KmsKey.objects.filter(id=key["key_id"]).update(deletion_date=timezone.now())
    assert sweep()["deleted_keys"] == [key["arn"]]
    r = run.submit("load_weights", path=saved, optimizer=True)
    assert r.status_code == 400 and "deleted" in r.json()["detail"]
    assert all(is_sealed(f) for f in folder_of(saved).iterdir())


@pytest.fixture
def aws_kms(moto_kms, settings, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings.KMS_AWS_ENDPOINT_URL = moto_kms
    settings.KMS_AWS_REGION = "us-east-1"
    yield providers.aws_client()
    providers.aws_clients_close()


def test_an_aws_kms_key_seals_and_opens_checkpoints(alice, runtime, scratch, aws_kms) -> None:
    key = new_key(alice, provider="aws", description="in AWS", alias="alias/aws-backed")
    assert key["provider"] == "aws" and key["aws_key_id"] and key["current_version"] is None
    meta = aws_kms.describe_key(KeyId=key["aws_key_id"])["KeyMetadata"]
    assert meta["Description"] == "in AWS" and meta["KeyState"] == "Enabled"
    existing = aws_kms.create_key(Description="brought along")["KeyMetadata"]["KeyId"]
    brought = new_key(alice, provider="aws", aws_key_id=existing)
    assert brought["aws_key_id"] == existing
    r = alice.post("kms/keys", {"provider": "aws", "aws_key_id": "11111111-2222-3333-4444-5"})
    assert r.status_code == 400 and r.json()["field"] == "aws_key_id"
    assert "NotFoundException" in r.json()["detail"]

    sid = open_session(alice, tags=[], kms_key_arn=key["arn"])
    run = Run(alice, runtime, sid)
    run.train()
    saved, expected = run.save("s1")["path"], run.outputs()
    assert_sealed(folder_of(saved), key["arn"], saved, alice.tenant)
    assert {read_header(f).provider for f in folder_of(saved).iterdir()} == {"aws"}
    fresh = Run(alice, runtime, sid, seq=1)
    fresh.load(saved)
    assert fresh.outputs() == pytest.approx(expected, rel=1e-6, abs=1e-6)

    rotated = key_action(alice, key, "rotate")
    assert rotated["rotated_at"] is not None
    fresh.load(saved)
    key_action(alice, key, "disable")
    assert run.submit("save_weights", path="s2").status_code == 400
    key_action(alice, key, "enable")
    assert run.save("s2")["path"].endswith("/s2")
    assert list(scratch.iterdir()) == []
