"""Dimuon through the wire: chosen at create_model, stepped with optimizer_params, kept by saves
and loads; a step or a load of the other family is a 400 naming the field."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
import torch
from safetensors.torch import load_file

from controlplane.training_sessions.models import Operation
from tests.support.tiny_worker import TINY
from tests.support.wire import datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db

DIMUON = {"type": "dimuon", "version": 1}
DIMUON_STEP = {"type": "dimuon", "learning_rate": 0.01, "grad_clip_norm": 1.0}
ADAM_STEP = {"learning_rate": 0.01}


def create(person, runtime, session_id: str, seq: int, optimizer: dict | None = None) -> str:
    body = {
        "session_id": session_id,
        "model_seq_id": seq,
        "base_model": TINY,
        "lora_config": {"rank": 4, "seed": 0},
    }
    if optimizer is not None:
        body["optimizer_config"] = optimizer
    r = person.post("create_model", body)
    assert r.status_code == 200, r.content
    return result(person, runtime, r.json())["model_id"]


def step(model_id: str, seq: int, dimuon: bool) -> dict:
    key, params = ("optimizer_params", DIMUON_STEP) if dimuon else ("adam_params", ADAM_STEP)
    return {"model_id": model_id, "seq_id": seq, key: params}


def test_each_model_steps_with_its_own_family_and_refuses_the_other(
    alice, charlie, runtime
) -> None:
    sid = open_session(alice)
    dimuon, adamw = create(alice, runtime, sid, 0, DIMUON), create(alice, runtime, sid, 1)
    assert alice.post("get_info", {"model_id": dimuon}).json()["optimizer"] == "dimuon"
    assert alice.post("get_info", {"model_id": adamw}).json()["optimizer"] == "adamw"
    for mid in (dimuon, adamw):
        assert "metrics" in result(
            alice,
            runtime,
            alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2, 3])])).json(),
        )
    for mid, field, family in (
        (dimuon, "adam_params", "dimuon"),
        (adamw, "optimizer_params", "adamw"),
    ):
        r = alice.post("optim_step", step(mid, 2, dimuon=mid == adamw))
        assert r.status_code == 400, r.content
        assert r.json()["field"] == field
        assert f"this model's optimizer is {family}" in r.json()["detail"]
        assert Operation.objects.get(model_id=mid, seq_id=2).status == Operation.Status.FAILED
    assert charlie.post("optim_step", step(dimuon, 3, dimuon=True)).status_code == 404
    for mid in (dimuon, adamw):
        done = result(alice, runtime, alice.post("optim_step", step(mid, 3, mid == dimuon)).json())
        assert done["metrics"]["step:max"] == 1.0, done
    r = alice.post("optim_step", {"model_id": dimuon, "seq_id": 4})
    assert r.status_code == 400 and "exactly one of them" in r.json()["detail"]


def test_saves_and_loads_keep_the_family(alice, charlie, runtime) -> None:
    sid = open_session(alice)
    dimuon = create(alice, runtime, sid, 0, DIMUON)
    result(
        alice, runtime, alice.post("forward_backward", fwdbwd(dimuon, 1, [datum([4, 5, 6])])).json()
    )
    result(alice, runtime, alice.post("optim_step", step(dimuon, 2, True)).json())
    saved = result(
        alice,
        runtime,
        alice.post("save_weights", {"model_id": dimuon, "seq_id": 3, "path": "s"}).json(),
    )
    path = saved["path"]
    assert alice.post("weights_info", {"tinker_path": path}).json()["optimizer"] == "dimuon"
    assert charlie.post("weights_info", {"tinker_path": path}).status_code == 404

    def load_new(seq: int, optimizer: bool, config: dict | None = None):
        body = {"session_id": sid, "model_seq_id": seq, "path": path, "optimizer": optimizer}
        if config is not None:
            body["optimizer_config"] = config
        return alice.post("load_weights", body)

    # with the optimizer state: the checkpoint's family, which optimizer_config may only repeat
    r = load_new(1, True, {"type": "adamw"})
    assert r.status_code == 400 and r.json()["field"] == "optimizer_config"
    resumed = result(alice, runtime, load_new(2, True, DIMUON).json())["model_id"]
    fresh = result(alice, runtime, load_new(3, False).json())["model_id"]  # weights only: AdamW
    families = {
        m: alice.post("get_info", {"model_id": m}).json()["optimizer"] for m in (resumed, fresh)
    }
    assert families == {resumed: "dimuon", fresh: "adamw"}
    result(
        alice,
        runtime,
        alice.post("forward_backward", fwdbwd(resumed, 1, [datum([4, 5, 6])])).json(),
    )
    done = result(alice, runtime, alice.post("optim_step", step(resumed, 2, True)).json())
    assert done["metrics"]["step:max"] == 2.0  # it goes on from the saved step

    # into a live model: the checkpoint's optimizer state must be of its family, and a load
    # never changes the family
    r = alice.post(
        "load_weights", {"model_id": fresh, "seq_id": 1, "path": path, "optimizer": True}
    )
    assert r.status_code == 400 and r.json()["field"] == "path"
    assert "holds dimuon optimizer state" in r.json()["detail"]
    r = alice.post(
        "load_weights",
        {
            "model_id": fresh,
            "seq_id": 2,
            "path": path,
            "optimizer": False,
            "optimizer_config": DIMUON,
        },
    )
    assert r.status_code == 400 and r.json()["field"] == "optimizer_config"
    r = alice.post(
        "load_weights", {"model_id": fresh, "seq_id": 3, "path": path, "optimizer": False}
    )
    assert result(alice, runtime, r.json())["path"] == path


def test_a_dimuon_state_downloads_with_its_momentum(alice, runtime, settings, tmp_path) -> None:
    """Exported like AdamW's state: optimizer.safetensors holds the momentum (exp_avg) bit for
    bit, and loopwright.json says the family."""
    settings.DOWNLOAD_SCRATCH_DIR = str(tmp_path / "downloads")
    mid = create(alice, runtime, open_session(alice), 0, DIMUON)
    result(
        alice, runtime, alice.post("forward_backward", fwdbwd(mid, 1, [datum([7, 8, 9])])).json()
    )
    result(alice, runtime, alice.post("optim_step", step(mid, 2, True)).json())
    momentum = {k: v.clone() for k, v in runtime.host.pool.optimizer(mid).exp_avg.items()}
    saved = alice.post("save_weights", {"model_id": mid, "seq_id": 3, "path": "s"}).json()
    path = result(alice, runtime, saved)["path"]
    r = alice.get("registry/model-packages/download", {"path": path, "include_optimizer": "true"})
    assert r.status_code == 200, r.content
    with tarfile.open(fileobj=io.BytesIO(b"".join(r.streaming_content)), mode="r:gz") as tar:
        tar.extractall(tmp_path / "out", filter="data")
    (folder,) = (tmp_path / "out").iterdir()
    exported = load_file(folder / "optimizer.safetensors")
    assert exported.keys() == {f"exp_avg/{k}" for k in momentum}
    assert all(torch.equal(exported[f"exp_avg/{k}"], m) for k, m in momentum.items())
    meta = json.loads((folder / "loopwright.json").read_text())
    assert (meta["lora"]["optimizer"], meta["optimizer_step"]) == ("dimuon", 1)
