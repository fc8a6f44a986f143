"""The SDK takes a model package version's ARN wherever it takes a checkpoint's tinker:// path;
the server resolves it."""

from __future__ import annotations

from fake_server import BASE_MODEL, FakeServer

from loopwright import ServiceClient

PACKAGES = "arn:loopwright:registry::123456789012:model-package/run-x"


def test_resume_and_sample_from_model_package_arns(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=8)
    state = client.save_state("step-1").result(timeout=10)
    sampler_path = client.save_weights_for_sampler("s1").result(timeout=10).path
    # what the server resolves each version ARN to
    server.checkpoints[f"{PACKAGES}/1"] = server.checkpoints[state.path]
    server.checkpoints[f"{PACKAGES}/2"] = server.checkpoints[sampler_path]

    resumed = service.create_training_client_from_state_with_optimizer(f"{PACKAGES}/1")
    assert server.calls("load_weights")[-1]["path"] == f"{PACKAGES}/1"
    model = server.models[resumed.model_id]
    assert model.lora["rank"] == 8 and model.lora["loaded_optimizer"] is True
    plain = service.create_training_client_from_state(f"{PACKAGES}/1")
    assert server.models[plain.model_id].lora["loaded_optimizer"] is False
    sampler = service.create_sampling_client(model_path=f"{PACKAGES}/2")
    assert sampler.get_base_model() == BASE_MODEL
