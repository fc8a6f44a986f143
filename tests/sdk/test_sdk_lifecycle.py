"""Sessions: one per training client, heartbeats, stopping (also on errors), resuming from state."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fake_server import API_KEY, BASE_MODEL, FAST_RETRY, FakeServer

import loopwright
from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput

VPC = {"subnets": ["subnet-0a1b2c3d"], "security_group_ids": ["sg-0a1b2c3d"]}
DATUM = Datum(
    model_input=ModelInput.from_ints([1, 2, 3]),
    loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
)


def client_for(server: FakeServer, **kw: object) -> ServiceClient:
    return ServiceClient(api_key=API_KEY, transport=server.transport, retry=FAST_RETRY, **kw)  # type: ignore[arg-type]


def wait_until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_nothing_is_sent_until_needed(server: FakeServer) -> None:
    with client_for(server):
        pass
    assert server.log == []


def test_each_training_client_has_its_own_session(server: FakeServer) -> None:
    with client_for(server, role_arn="arn:r", kms_key_arn="arn:k", tags=["t"]) as service:
        first = service.create_lora_training_client(BASE_MODEL, training_session_name="one")
        second = service.create_lora_training_client(
            BASE_MODEL, role_arn="arn:other", vpc_config=VPC, user_metadata={"a": 1}
        )
        assert first.session_id != second.session_id
        first.stop()
        states = {s.session_id: s.state for s in service.list_sessions()}
        assert states == {first.session_id: "stopped", second.session_id: "active"}
        assert service.get_session(second.session_id).model_ids == [second.model_id]
    one, two = server.sessions[first.session_id], server.sessions[second.session_id]
    assert (one["name"], one["role_arn"], one["kms_key_arn"], one["tags"]) == (
        "one",
        "arn:r",
        "arn:k",
        ["t"],
    )
    assert (two["role_arn"], two["kms_key_arn"], two["vpc_config"]) == (
        "arn:other",
        "arn:k",
        VPC,
    )
    assert two["state"] == "stopped"  # closing the service client stopped it
    create_model = server.calls("create_model")[1]
    assert create_model["model_seq_id"] == 0 and create_model["user_metadata"] == {"a": 1}
    assert create_model["lora_config"] == {
        "rank": 32,
        "train_unembed": True,
        "train_mlp": True,
        "train_attn": True,
    }


def test_context_managers_stop_sessions_on_errors(server: FakeServer) -> None:
    with pytest.raises(RuntimeError, match="user code"), client_for(server) as service:
        client = service.create_lora_training_client(BASE_MODEL)
        raise RuntimeError("user code failed")
    assert server.sessions[client.session_id]["state"] == "stopped"

    with (
        client_for(server) as service,
        pytest.raises(RuntimeError),
        service.create_lora_training_client(BASE_MODEL) as tc,
    ):
        raise RuntimeError("boom")
        assert service.get_session(tc.session_id).state == "stopped"


def test_a_failed_model_creation_stops_its_session(server: FakeServer) -> None:
    server.fail_operation("create_model", "no capacity", "server")
    with (
        client_for(server) as service,
        pytest.raises(loopwright.RequestFailedError, match="no capacity"),
    ):
        service.create_lora_training_client(BASE_MODEL)
    assert [s["state"] for s in server.sessions.values()] == ["stopped"]


def test_replicas_are_sent_only_when_asked_for(server: FakeServer) -> None:
    with client_for(server) as service:
        service.create_lora_training_client(BASE_MODEL, replicas=2)
        service.create_lora_training_client(BASE_MODEL)  # the server's default, 1
        asyncio.run(service.create_lora_training_client_async(BASE_MODEL, replicas=3))
    sent = server.calls("create_model")
    assert [body.get("replicas") for body in sent] == [2, None, 3]
    assert "replicas" not in sent[1]  # a server that predates the field still takes the body


@pytest.mark.parametrize("replicas", [0, -1, "two", 1.5])
def test_bad_replicas_are_refused_before_a_session_opens(server: FakeServer, replicas) -> None:
    with client_for(server) as service, pytest.raises(ValueError, match="replicas"):
        service.create_lora_training_client(BASE_MODEL, replicas=replicas)
    assert server.log == []


def test_a_refused_replicas_raises_the_servers_error_and_stops_the_session(
    server: FakeServer,
) -> None:
    detail = "replicas: 16 is above the limit of account 123456789012, 8 replicas per model"
    body = {"detail": detail, "code": "quota_exceeded", "field": "replicas"}
    server.fail_http("create_model", 400, body=body)
    with (
        client_for(server) as service,
        pytest.raises(loopwright.BadRequestError, match="8 replicas per model") as refused,
    ):
        service.create_lora_training_client(BASE_MODEL, replicas=16)
    assert refused.value.status_code == 400 and "(replicas)" in str(refused.value)
    assert len(server.calls("create_model")) == 1  # a 400 is not retried
    assert [s["state"] for s in server.sessions.values()] == ["stopped"]


def test_heartbeats_run_and_stop_after_close(server: FakeServer) -> None:
    service = client_for(server, heartbeat_interval=0.01)
    client = service.create_lora_training_client(BASE_MODEL)
    wait_until(lambda: server.heartbeats[client.session_id] >= 3)
    service.close()
    count = server.heartbeats[client.session_id]
    time.sleep(0.05)
    assert server.heartbeats[client.session_id] == count
    assert not [t for t in threading.enumerate() if t.name.startswith("loopwright")]


def test_heartbeats_stop_on_410(server: FakeServer) -> None:
    with client_for(server, heartbeat_interval=0.01) as service:
        client = service.create_lora_training_client(BASE_MODEL)
        wait_until(lambda: server.heartbeats[client.session_id] >= 1)
        server.sessions[client.session_id]["state"] = "expired"  # the server ended it
        heartbeat = service._runtime.heartbeat
        wait_until(lambda: not heartbeat.running)
        assert heartbeat.sessions == set()
        with pytest.raises(loopwright.GoneError):
            client.optim_step(AdamParams()).result(timeout=5)


def test_a_closed_client_refuses_work(server: FakeServer) -> None:
    service = client_for(server)
    service.close()
    service.close()  # twice is fine
    with pytest.raises(loopwright.LoopwrightError, match="closed"):
        service.create_lora_training_client(BASE_MODEL)


def test_resume_from_state_with_optimizer(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=8, train_unembed=False)
    client.forward_backward([DATUM], "cross_entropy")
    client.optim_step(AdamParams())
    state = client.save_state("step-1").result(timeout=10)
    sampler_path = client.save_weights_for_sampler("s1").result(timeout=10).path

    resumed = service.create_training_client_from_state_with_optimizer(
        state.path, training_session_name="resumed"
    )
    assert resumed.session_id != client.session_id
    model = server.models[resumed.model_id]
    assert model.lora["rank"] == 8 and model.lora["train_unembed"] is False
    assert model.lora["loaded_optimizer"] is True and model.steps == 1
    assert server.calls("load_weights")[0] == {
        "model_id": resumed.model_id,
        "seq_id": 1,
        "path": state.path,
        "optimizer": True,
        "type": "load_weights",
    }
    plain = service.create_training_client_from_state(state.path)
    assert server.models[plain.model_id].lora["loaded_optimizer"] is False

    with pytest.raises(ValueError, match="cannot be loaded for training"):
        service.create_training_client_from_state(sampler_path)
    with pytest.raises(ValueError, match="cannot be loaded for training"):
        client.load_state(sampler_path)
    sampler = service.create_sampling_client(model_path=sampler_path)
    assert sampler.get_base_model() == BASE_MODEL
    with pytest.raises(ValueError, match="model_path"):
        service.create_sampling_client()


def test_loading_a_missing_checkpoint_fails_and_stops_the_session(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL)
    client.save_state("a").result(timeout=10)
    path = f"tinker://{client.model_id}/weights/a"
    del server.checkpoints[path]
    server.checkpoints[path + "-info-only"] = {}
    with pytest.raises(loopwright.NotFoundError):
        service.create_training_client_from_state(path)
    with pytest.raises(loopwright.RequestFailedError, match="no checkpoint"):
        client.load_state(path).result(timeout=10)


def test_model_info_capabilities_and_unload(server: FakeServer, service: ServiceClient) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    info = client.get_info()
    assert (info.model_id, info.lora_rank, info.model_data.model_name) == (
        client.model_id,
        4,
        BASE_MODEL,
    )
    capabilities = service.get_server_capabilities()
    assert capabilities.supported_models[0].model_name == BASE_MODEL
    assert client.unload().result(timeout=10).model_id == client.model_id
    assert service.session_id == service.session_id  # the default session is opened once
    assert len(server.calls("create_session")) == 2


def test_train_projector_is_sent_only_when_on_and_resumes(
    server: FakeServer, service: ServiceClient
) -> None:
    service.create_lora_training_client(BASE_MODEL, rank=4)
    client = service.create_lora_training_client(BASE_MODEL, rank=4, train_projector=True)
    plain, projected = (c["lora_config"] for c in server.calls("create_model")[-2:])
    assert "train_projector" not in plain  # the body a server without the flag reads
    assert projected["train_projector"] is True
    assert server.models[client.model_id].lora["train_projector"] is True
    state = client.save_state("p").result(timeout=10)
    resumed = service.create_training_client_from_state(state.path)
    assert server.models[resumed.model_id].lora["train_projector"] is True
    assert loopwright.LoraConfig(rank=4).model_dump() == {
        "rank": 4,
        "alpha": None,
        "seed": None,
        "train_unembed": True,
        "train_mlp": True,
        "train_attn": True,
    }
