"""Bad input gets a clear 4xx naming the field; nothing is harmed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.fleet.models import Worker
from controlplane.operations.session_end import sessions_expire_idle
from controlplane.training_sessions.models import Session
from tests.support.tiny_worker import TINY
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


def test_authentication(alice, client) -> None:
    assert client.get("/api/v1/healthz").json() == {"status": "ok"}  # no key needed
    r = client.post("/api/v1/create_session", {}, content_type="application/json")
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
    r = client.post(
        "/api/v1/create_session",
        {},
        content_type="application/json",
        HTTP_X_API_KEY="tml-nope.nope",
    )
    assert r.status_code == 401
    r = client.post(
        "/api/v1/create_session",
        {"tags": [], "sdk_version": "x", "role_arn": alice.role_arn},
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer " + alice.client._credentials["HTTP_X_API_KEY"],
    )
    assert r.status_code == 200


def test_malformed_and_mistyped_bodies_name_the_field(alice, runtime) -> None:
    r = alice.client.post("/api/v1/create_session", "{not json", content_type="application/json")
    assert r.status_code == 400 and "JSON" in r.json()["detail"]
    r = alice.post("create_session", {"tags": [], "sdk_version": "x", "colour": "red"})
    assert (
        r.status_code == 400
        and r.json()["field"] == "colour"
        and "unknown field" in r.json()["detail"]
    )
    sid = open_session(alice)
    r = alice.post("create_model", {"session_id": sid, "model_seq_id": "zero", "base_model": TINY})
    assert r.status_code == 400 and r.json()["field"] == "model_seq_id"
    mid = create_model(alice, runtime, sid)
    r = alice.post(
        "forward_backward",
        {
            "model_id": mid,
            "seq_id": 1,
            "forward_backward_input": {"data": [datum([1])], "loss_fn": "mse"},
        },
    )
    assert r.status_code == 400 and r.json()["field"].startswith("forward_backward_input.loss_fn")
    r = alice.post("forward_backward", fwdbwd(mid, 0, [datum([1])]))
    assert r.status_code == 400 and r.json()["field"] == "seq_id"
    r = alice.post("save_weights", {"model_id": mid, "seq_id": 1, "path": "../escape"})
    assert r.status_code == 400 and r.json()["field"] == "path"
    r = alice.post(
        "load_weights",
        {"model_id": mid, "seq_id": 1, "path": "tinker://nope/weights/x", "optimizer": True},
    )
    assert r.status_code == 404 and r.json()["field"] == "path"
    r = alice.post("retrieve_future", {"request_id": "req-missing"})
    assert r.status_code == 404 and r.json()["field"] == "request_id"
    # none of that touched the model; the refused seq_id 1 is used up, seq_id 2 runs
    refused = alice.post("forward_backward", fwdbwd(mid, 1, [datum([1, 2])]))
    assert refused.status_code == 409
    assert "metrics" in result(
        alice, runtime, alice.post("forward_backward", fwdbwd(mid, 2, [datum([1, 2])])).json()
    )


def test_oversize_body_is_413_with_the_limit(alice, settings) -> None:
    settings.MAX_REQUEST_BYTES = 1000
    r = alice.post("create_session", {"tags": ["x" * 2000], "sdk_version": "x"})
    assert r.status_code == 413 and "1000 bytes" in r.json()["detail"]


def test_an_unknown_base_model_is_a_404_naming_what_is_served(alice, charlie, runtime) -> None:
    """A typo is not worth retrying (a 503 would be, for minutes): a 404 naming the model and
    what is served."""
    sid = open_session(alice)
    for path, body in (
        ("create_model", {"session_id": sid, "model_seq_id": 0, "base_model": "no/such-model"}),
        (
            "create_sampling_session",
            {"session_id": sid, "sampling_session_seq_id": 0, "base_model": "no/such-model"},
        ),
    ):
        r = alice.post(path, body)
        assert r.status_code == 404, r.content
        assert (r.json()["code"], r.json()["field"]) == ("base_model_not_found", "base_model")
        assert "no/such-model" in r.json()["detail"] and TINY in r.json()["detail"]
    r = charlie.post("create_model", {"session_id": sid, "model_seq_id": 0, "base_model": TINY})
    assert r.status_code == 404 and r.json()["field"] == "session_id"


def test_a_served_base_model_without_a_live_worker_waits_in_the_queue(alice, runtime) -> None:
    """Known but not served right now: a sampler of the base model waits for a worker; one
    that a live worker serves but not on the session's network waits in the placement queue
    too (the chat faces, which cannot wait, answer 503 or 529 with Retry-After)."""
    sid = open_session(alice)
    Worker.objects.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": TINY},
    )
    assert r.status_code == 200, r.content
    Worker.objects.update(
        lease_expires_at=timezone.now() + timedelta(seconds=600), subnet_ids=["subnet-0abc1234"]
    )
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 1, "base_model": TINY},
    )
    assert r.status_code == 200, r.content
    assert r.json()["queue"]["waits_for"] == "network"


def test_a_full_worker_takes_no_more_models(alice, runtime) -> None:
    Worker.objects.update(capacity=1)
    sid = open_session(alice)
    create_model(alice, runtime, sid)
    r = alice.post("create_model", {"session_id": sid, "model_seq_id": 1, "base_model": TINY})
    assert r.status_code == 200  # accepted: it waits for a slot (test_vpc_placement.py)
    waiting = alice.post("get_info", {"model_id": r.json()["model_id"]}).json()
    assert waiting["placement"] == "waiting_for_capacity" and "full" in waiting["status_reason"]


def test_idle_sessions_expire_and_unload_their_models(alice, runtime, settings) -> None:
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    Session.objects.filter(pk=sid).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert sessions_expire_idle() == [sid]
    runtime.drain()
    assert not runtime.host.has_adapter(mid)
    detail = alice.get(f"sessions/{sid}").json()
    assert detail["state"] == "expired"
    assert alice.post("session_heartbeat", {"session_id": sid}).status_code == 410


def test_catalog_endpoints(alice, runtime) -> None:
    names = [m["name"] for m in alice.get("base_models").json()["base_models"]]
    assert names == [TINY]
    caps = alice.get("get_server_capabilities").json()
    assert caps["supported_models"] == [
        {"model_name": TINY, "max_context_length": 1024, "trainable": True, "sampleable": True}
    ]
    files = alice.get("base_models/tokenizer", {"name": TINY}).json()["files"]
    assert "tokenizer.json" in files and "tokenizer_config.json" in files
    assert alice.get("base_models/tokenizer", {"name": "nope"}).status_code == 404
    assert (
        alice.post("client/config", {"sdk_version": "0.24.1"}).json()["use_pyqwest_transport"]
        is False
    )


def test_expired_checkpoints_are_deleted_with_their_files(alice, runtime) -> None:
    from pathlib import Path

    from controlplane.housekeeping.janitor import sweep
    from controlplane.training_sessions.models import Checkpoint

    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)
    keep = result(
        alice,
        runtime,
        alice.post("save_weights", {"model_id": mid, "seq_id": 1, "path": "keep"}).json(),
    )
    brief = result(
        alice,
        runtime,
        alice.post(
            "save_weights", {"model_id": mid, "seq_id": 2, "path": "brief", "ttl_seconds": 60}
        ).json(),
    )
    folder = Path(Checkpoint.objects.get(tinker_path=brief["path"]).storage_path)
    assert folder.is_dir()
    assert sweep()["expired_checkpoints"] == []
    Checkpoint.objects.filter(tinker_path=brief["path"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert sweep()["expired_checkpoints"] == [brief["path"]]
    assert not folder.exists()
    assert alice.post("weights_info", {"tinker_path": brief["path"]}).status_code == 404
    assert alice.post("weights_info", {"tinker_path": keep["path"]}).status_code == 200
