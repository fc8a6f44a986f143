"""tinker 0.38's request fields: sent as tinker sends them, refused before sending when unsupported."""

from __future__ import annotations

import numpy as np
import pytest
from fake_server import BASE_MODEL, FakeServer

from loopwright import ServiceClient
from loopwright.types import (
    AdamParams,
    Datum,
    DimuonOptimizerConfig,
    DimuonParams,
    ModelInput,
    SamplingParams,
    TensorData,
)


def test_sample_sends_the_038_fields(server: FakeServer, service: ServiceClient) -> None:
    sampler = service.create_lora_training_client(BASE_MODEL, rank=4).create_sampling_client()
    target = TensorData.from_numpy(np.array([[-1], [7]]))
    sampler.sample(
        [1, 2, 3],
        2,
        SamplingParams(max_tokens=2),
        include_prompt_logprobs=True,
        topk_sample_logprobs=2,
        target_prompt_logprobs=target,
        prompt_alt_tokens_k=3,
        prompt_logprobs_last_n=1,
    ).result(timeout=10)
    body = server.calls("asample")[-1]
    assert body["prompt_logprobs"] is True
    assert body["topk_sample_logprobs"] == 2
    assert body["target_prompt_logprobs"]["data"] == [-1, 7]
    assert body["target_prompt_logprobs"]["shape"] == [2, 1]
    assert body["prompt_alt_tokens_k"] == 3
    assert body["prompt_logprobs_last_n"] == 1
    sampler.compute_logprobs([1, 2, 3, 4], prompt_logprobs_last_n=2).result(timeout=10)
    body = server.calls("asample")[-1]
    assert body["prompt_logprobs"] is True and body["prompt_logprobs_last_n"] == 2


@pytest.mark.parametrize("loss_fn", ["custom"])
def test_unsupported_losses_are_refused_before_anything_is_sent(
    server: FakeServer, service: ServiceClient, loss_fn: str
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2]), loss_fn_inputs={"target_tokens": [2, 3]}
    )
    with pytest.raises(ValueError, match=f"{loss_fn} is not supported"):
        client.forward_backward([datum], loss_fn)  # type: ignore[arg-type]
    assert server.calls("forward_backward") == []


def test_recorded_sampling_is_asked_for_on_every_way_to_make_a_sampler(
    server: FakeServer, service: ServiceClient
) -> None:
    training = service.create_lora_training_client(BASE_MODEL, rank=4)
    path = training.save_weights_for_sampler("s").result(timeout=10).path
    samplers = {
        "live": training.create_sampling_client(record_stability_info=True),
        "path": training.create_sampling_client(path, record_stability_info=True),
        "ephemeral": training.save_weights_and_get_sampling_client(record_stability_info=True),
        "named": training.save_weights_and_get_sampling_client("n", record_stability_info=True),
        "service": service.create_sampling_client(model_path=path, record_stability_info=True),
    }
    for name, sampler in samplers.items():
        sampler.sample([1, 2], 1, SamplingParams(max_tokens=2)).result(timeout=10)
        assert server.calls("asample")[-1]["record_stability_info"] is True, name
    training.create_sampling_client().sample([1, 2]).result(timeout=10)
    assert "record_stability_info" not in server.calls("asample")[-1]  # off unless asked for


def test_an_empty_stop_list_is_sent_and_none_is_left_out(
    server: FakeServer, service: ServiceClient
) -> None:
    sampler = service.create_lora_training_client(BASE_MODEL, rank=4).create_sampling_client()
    sampler.sample([1, 2], 1, SamplingParams(max_tokens=2, stop=[])).result(timeout=10)
    assert server.calls("asample")[-1]["sampling_params"]["stop"] == []
    sampler.sample([1, 2], 1, SamplingParams(max_tokens=2)).result(timeout=10)
    assert "stop" not in server.calls("asample")[-1]["sampling_params"]


def test_provenance_travels_with_the_datum(server: FakeServer, service: ServiceClient) -> None:
    from loopwright.types import PromptProvenanceSpan, SampledProvenanceSpan

    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2, 3]), loss_fn_inputs={"target_tokens": [2, 3, 4]}
    ).with_provenance(
        model_input=[
            PromptProvenanceSpan(sequence_id="r:0", length=2),
            SampledProvenanceSpan(sequence_id="r:0", length=1),
        ],
        loss_fn_inputs=[
            PromptProvenanceSpan(sequence_id="r:0", offset=1, length=1),
            SampledProvenanceSpan(sequence_id="r:0", length=2),
        ],
    )
    with pytest.raises(ValueError, match="must tile it exactly"):
        datum.with_provenance(
            model_input=[PromptProvenanceSpan(sequence_id="r:0", length=2)],
            loss_fn_inputs=[SampledProvenanceSpan(sequence_id="r:0", length=3)],
        )
    client.forward_backward([datum], "cross_entropy").result(timeout=10)
    (sent,) = server.calls("forward_backward")[-1]["forward_backward_input"]["data"]
    assert Datum.model_validate(sent) == datum
    assert sent["loss_fn_input_spans"][1] == {
        "type": "sampled_tokens",
        "sequence_id": "r:0",
        "offset": 0,
        "length": 2,
    }


def test_provenance_counts_an_image_by_its_expected_tokens() -> None:
    from loopwright.types import EncodedTextChunk, ImageChunk, PromptProvenanceSpan

    def with_image(**declared) -> Datum:
        chunks = [
            EncodedTextChunk(tokens=[1]),
            ImageChunk(data=b"\x89PNG", format="png", **declared),
        ]
        return Datum(model_input=ModelInput(chunks=chunks), loss_fn_inputs={"target_tokens": [0]})

    spans = [PromptProvenanceSpan(sequence_id="r:0", length=1 + 16)]
    targets = [PromptProvenanceSpan(sequence_id="r:0", length=1)]
    datum = with_image(expected_tokens=16).with_provenance(spans, targets)
    assert datum.model_input_spans == spans
    with pytest.raises(ValueError, match="must tile it exactly"):
        with_image(expected_tokens=15).with_provenance(spans, targets)
    with pytest.raises(ValueError, match="needs expected_tokens"):
        with_image().with_provenance(spans, targets)


def test_stable_reinforce_is_sent_with_its_inputs(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={
            "target_tokens": [2, 3, 4],
            "logprobs": [0.0, -1.5, -0.5],
            "advantages": [0.0, 1.0, 1.0],
            "sampled_mask": [0, 1, 1],
        },
    )
    client.forward_backward([datum], "stable_reinforce", {"kl_coeff": 0.01}).result(timeout=10)
    body = server.calls("forward_backward")[-1]["forward_backward_input"]
    assert (body["loss_fn"], body["loss_fn_config"]) == ("stable_reinforce", {"kl_coeff": 0.01})
    mask = body["data"][0]["loss_fn_inputs"]["sampled_mask"]
    assert (mask["dtype"], mask["data"]) == ("float32", [0.0, 1.0, 1.0])
    sent = len(server.calls("forward_backward"))
    for config, says in (
        ({"mask_high": 0.5}, "mask_high: 0.5 is not ≥ 1"),
        ({"beta": 0.1}, "beta: not a parameter of stable_reinforce"),
    ):
        with pytest.raises(ValueError, match=says):
            client.forward_backward([datum], "stable_reinforce", config)
    assert len(server.calls("forward_backward")) == sent  # refused before anything is sent


def test_dimuon_is_chosen_at_creation_and_stepped_with_its_params(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(
        BASE_MODEL, rank=4, optimizer=DimuonOptimizerConfig()
    )
    create = server.calls("create_model")[-1]
    assert create["optimizer_config"] == {"type": "dimuon", "version": 1}
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2]), loss_fn_inputs={"target_tokens": [2, 3]}
    )
    client.forward_backward([datum], "cross_entropy")
    client.optim_step(DimuonParams(learning_rate=0.02, beta1=0.8)).result(timeout=10)
    body = server.calls("optim_step")[-1]
    assert "adam_params" not in body
    assert body["optimizer_params"] == {
        "type": "dimuon",
        "learning_rate": 0.02,
        "grad_clip_norm": 0.0,
        "beta1": 0.8,
    }
    state = client.save_state("d").result(timeout=10)
    resumed = service.create_training_client_from_state_with_optimizer(state.path)
    assert server.models[resumed.model_id].lora["optimizer"] == "dimuon"  # the checkpoint's
    plain = service.create_training_client_from_state(state.path)
    assert server.models[plain.model_id].lora["optimizer"] == "adamw"
    adam = service.create_lora_training_client(BASE_MODEL, rank=4)
    adam.optim_step(AdamParams()).result(timeout=10)
    assert "optimizer_params" not in server.calls("optim_step")[-1]
    adam.optim_step(adam_params=AdamParams(learning_rate=0.5)).result(timeout=10)  # the old keyword
    assert server.calls("optim_step")[-1]["adam_params"]["learning_rate"] == 0.5
    with pytest.raises(ValueError, match="not both"):
        adam.optim_step(AdamParams(), adam_params=AdamParams())
    assert "optimizer_config" not in server.calls("create_model")[-1]
