"""Wire compatibility with the official tinker SDK (0.24.1): same fields, defaults and bodies."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from loopwright import types as lw

tt = pytest.importorskip("tinker.types")
pydantic_conv = pytest.importorskip("tinker.lib._pydantic_conv")


def _tinker_pydantic(module: str, name: str) -> type[BaseModel]:
    """tinker's pydantic mirror of a type whose public form is a dataclass."""
    cls: type[BaseModel] = getattr(
        importlib.import_module(f"tinker.types._pydantic_types.{module}"), name
    )
    return cls


PAIRS: list[tuple[type[BaseModel], type[BaseModel]]] = [
    (lw.TensorData, _tinker_pydantic("tensor_data", "TensorData")),
    (lw.Datum, _tinker_pydantic("datum", "Datum")),
    (lw.ForwardBackwardInput, _tinker_pydantic("forward_backward_input", "ForwardBackwardInput")),
    (
        lw.ForwardBackwardOutput,
        _tinker_pydantic("forward_backward_output", "ForwardBackwardOutput"),
    ),
    (
        lw.ForwardBackwardRequest,
        _tinker_pydantic("forward_backward_request", "ForwardBackwardRequest"),
    ),
    (lw.ForwardRequest, _tinker_pydantic("forward_request", "ForwardRequest")),
    (lw.SampleResponse, _tinker_pydantic("sample_response", "SampleResponse")),
    (lw.SampledSequence, _tinker_pydantic("sampled_sequence", "SampledSequence")),
    (lw.EncodedTextChunk, tt.EncodedTextChunk),
    (lw.ImageChunk, tt.ImageChunk),
    (lw.ImageAssetPointerChunk, tt.ImageAssetPointerChunk),
    (lw.ModelInput, tt.ModelInput),
    (lw.SamplingParams, tt.SamplingParams),
    (lw.SampleRequest, tt.SampleRequest),
    (lw.AdamParams, tt.AdamParams),
    (lw.OptimStepRequest, tt.OptimStepRequest),
    (lw.OptimStepResponse, tt.OptimStepResponse),
    (lw.LoraConfig, tt.LoraConfig),
    (lw.CreateSessionRequest, tt.CreateSessionRequest),
    (lw.CreateSessionResponse, tt.CreateSessionResponse),
    (lw.SessionHeartbeatRequest, tt.SessionHeartbeatRequest),
    (lw.SessionHeartbeatResponse, tt.SessionHeartbeatResponse),
    (lw.GetSessionResponse, tt.GetSessionResponse),
    (lw.ListSessionsResponse, tt.ListSessionsResponse),
    (lw.CreateModelRequest, tt.CreateModelRequest),
    (lw.CreateModelResponse, tt.CreateModelResponse),
    (lw.GetInfoRequest, tt.GetInfoRequest),
    (lw.GetInfoResponse, tt.GetInfoResponse),
    (lw.ModelData, tt.ModelData),
    (lw.UnloadModelRequest, tt.UnloadModelRequest),
    (lw.UnloadModelResponse, tt.UnloadModelResponse),
    (lw.SaveWeightsRequest, tt.SaveWeightsRequest),
    (lw.SaveWeightsResponse, tt.SaveWeightsResponse),
    (lw.SaveWeightsForSamplerRequest, tt.SaveWeightsForSamplerRequest),
    (lw.SaveWeightsForSamplerResponse, tt.SaveWeightsForSamplerResponse),
    (lw.SaveWeightsForSamplerResponseInternal, tt.SaveWeightsForSamplerResponseInternal),
    (lw.LoadWeightsRequest, tt.LoadWeightsRequest),
    (lw.LoadWeightsResponse, tt.LoadWeightsResponse),
    (lw.WeightsInfoResponse, tt.WeightsInfoResponse),
    (lw.CreateSamplingSessionRequest, tt.CreateSamplingSessionRequest),
    (lw.CreateSamplingSessionResponse, tt.CreateSamplingSessionResponse),
    (lw.GetSamplerResponse, tt.GetSamplerResponse),
    (lw.FutureRetrieveRequest, tt.FutureRetrieveRequest),
    (lw.UntypedAPIFuture, tt.UntypedAPIFuture),
    (
        lw.TryAgainResponse,
        importlib.import_module("tinker.types.try_again_response").TryAgainResponse,
    ),
    (lw.RequestFailedResponse, tt.RequestFailedResponse),
    (lw.GetServerCapabilitiesResponse, tt.GetServerCapabilitiesResponse),
    (lw.SupportedModel, tt.SupportedModel),
    (lw.HealthResponse, tt.HealthResponse),
    (lw.ClientConfigRequest, tt.ClientConfigRequest),
    (lw.ClientConfigResponse, tt.ClientConfigResponse),
    (lw.Cursor, tt.Cursor),
    (lw.Checkpoint, tt.Checkpoint),
    (lw.CheckpointsListResponse, tt.CheckpointsListResponse),
    (lw.ParsedCheckpointTinkerPath, tt.ParsedCheckpointTinkerPath),
    (lw.TrainingRun, tt.TrainingRun),
    (lw.TrainingRunsResponse, tt.TrainingRunsResponse),
]

# Deliberate differences, each more lenient than tinker or asked for by the protocol.
DEFAULT_EXCEPTIONS = {
    # tinker requires the key but its own client omits it when None (exclude_none)
    ("CreateSessionRequest", "user_metadata"),
    # tinker's client reads try_again bodies without requiring queue_state
    ("TryAgainResponse", "queue_state"),
    ("ForwardBackwardOutput", "metrics"),
    # Loopwright tells clients not to use the pyqwest transport
    ("ClientConfigResponse", "use_pyqwest_transport"),
    # a step sends adam_params or (tinker 0.38, Dimuon) optimizer_params, one of the two
    ("OptimStepRequest", "adam_params"),
}
# Loopwright's extensions: optional, with defaults, so tinker's bodies still validate.
EXTRA_FIELDS = {
    # tinker 0.38's provenance (Datum.with_provenance) and sequence ids, which 0.24.1 lacks
    ("Datum", "model_input_spans"),
    ("Datum", "loss_fn_input_spans"),
    ("SampledSequence", "sequence_id"),
    ("SupportedModel", "trainable"),
    ("SupportedModel", "sampleable"),
    ("Checkpoint", "base_model"),  # tinker 0.39
    ("TryAgainResponse", "queue_state_reason"),
    ("LoraConfig", "alpha"),
    ("LoraConfig", "train_projector"),  # a VLM's projector (docs/vision.md)
    ("WeightsInfoResponse", "train_projector"),
    ("CreateSamplingSessionRequest", "model_id"),
    ("SaveWeightsForSamplerRequest", "merge_weights"),
    ("GetInfoResponse", "session_id"),
    ("GetInfoResponse", "next_seq_id"),
    ("GetInfoResponse", "next_sampling_session_seq_id"),
    ("GetInfoResponse", "replicas"),
    ("GetInfoResponse", "optimizer"),
    # the placement queue: where a waiting model or sampler stands
    ("GetInfoResponse", "placement"),
    ("GetInfoResponse", "status_reason"),
    ("GetInfoResponse", "queue"),
    ("TryAgainResponse", "queue"),
    ("UntypedAPIFuture", "queue"),
    # context as a setting
    ("CreateModelRequest", "context_length"),
    ("GetInfoResponse", "context_length"),
    ("CreateSamplingSessionResponse", "queue"),
    ("GetSamplerResponse", "queue"),
    ("WeightsInfoResponse", "optimizer"),
    ("CreateModelRequest", "replicas"),
    # Fields of the newer protocol (tinker 0.38) that 0.24.1 does not have.
    ("CreateModelRequest", "optimizer_config"),
    *(
        ("SampleRequest", name)
        for name in (
            "topk_sample_logprobs",
            "target_prompt_logprobs",
            "prompt_alt_tokens_k",
            "prompt_logprobs_last_n",
            "record_stability_info",
        )
    ),
    ("SampleResponse", "target_prompt_logprobs"),
    ("SampleResponse", "prompt_alt_tokens"),
    ("SampledSequence", "topk_logprobs"),
    # Loopwright's sampling controls (docs/sampling.md): the official SDK cannot send them
    *(
        ("SamplingParams", name)
        for name in (
            "min_p",
            "repetition_penalty",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
            "json_schema",
            "regex",
            "grammar",
            "logprobs_of",
        )
    ),
    ("SampledSequence", "model_logprobs"),
    # what tinker 0.25–0.38 added (driven against the server by tests/e2e with 0.38.0)
    ("CreateSessionRequest", "display_name"),
    ("LoadWeightsRequest", "optimizer_config"),
    ("OptimStepRequest", "optimizer_params"),
    ("SaveWeightsRequest", "user_metadata"),
    ("SaveWeightsForSamplerRequest", "kind"),
    ("SaveWeightsForSamplerRequest", "user_metadata"),
    ("UntypedAPIFuture", "sample_sequence_ids"),
    ("ImageChunk", "override_dimensions"),
    *(
        ("ClientConfigResponse", name)
        for name in (
            "fwdbwd_max_chunk_len",
            "fwdbwd_max_chunk_bytes_count",
            "fwdbwd_dispatch_bytes_semaphore_size",
            "sample_use_retrieve_futures",
            "custom_loss_server_side",
            "sample_join_sampling_session",
        )
    ),
    *(
        ("CreateSessionRequest", name)
        for name in (
            "name",
            "role_arn",
            "model_package_group_arn",
            "s3_output_path",
            "kms_key_arn",
            "vpc_config",
            "context_length",
        )
    ),
}


def _default(field: Any) -> Any:
    if field.default_factory is not None:
        return field.default_factory()
    return field.default


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda c: c.__name__)
def test_same_fields_defaults_and_strictness(
    ours: type[BaseModel], theirs: type[BaseModel]
) -> None:
    name = ours.__name__
    our_fields = {k for k in ours.model_fields if (name, k) not in EXTRA_FIELDS}
    assert our_fields == set(theirs.model_fields)
    for key, field in theirs.model_fields.items():
        if (name, key) in DEFAULT_EXCEPTIONS:
            continue
        assert _default(ours.model_fields[key]) == _default(field), key
        assert ours.model_fields[key].is_required() == field.is_required(), key
    assert ours.model_config.get("extra") == theirs.model_config.get("extra")


def test_exceptions_are_only_relaxations_or_the_pyqwest_flag() -> None:
    assert lw.CreateSessionRequest.model_fields["user_metadata"].default is None
    assert lw.TryAgainResponse.model_fields["queue_state"].default is None
    assert lw.OptimStepRequest.model_fields["adam_params"].default is None
    assert lw.ClientConfigResponse().use_pyqwest_transport is False
    assert tt.ClientConfigResponse.model_fields["use_pyqwest_transport"].default is True
    assert all(
        field.default is not PydanticUndefined
        for field in lw.ClientConfigResponse.model_fields.values()
    )


def _wire(model: BaseModel) -> dict[str, Any]:
    """A body as tinker's client sends it; our extensions are left out while at their default."""
    body: dict[str, Any] = model.model_dump(exclude_none=True, mode="json")
    name = type(model).__name__
    for key, field in type(model).model_fields.items():
        if (name, key) in EXTRA_FIELDS and key in body and body[key] == _default(field):
            del body[key]
    return body


def test_extensions_are_optional() -> None:
    for name, key in EXTRA_FIELDS:
        assert not getattr(lw, name).model_fields[key].is_required(), (name, key)


PAYLOADS: list[tuple[str, dict[str, Any]]] = [
    ("TensorData", {"data": [1.5, 2.5], "dtype": "float32", "shape": [2]}),
    (
        "TensorData",
        {
            "data": [5, 7],
            "dtype": "int64",
            "shape": [2, 3],
            "sparse_crow_indices": [0, 1, 2],
            "sparse_col_indices": [2, 0],
        },
    ),
    ("ModelInput", {"chunks": [{"tokens": [1, 2]}, {"type": "encoded_text", "tokens": [3]}]}),
    (
        "ModelInput",
        {"chunks": [{"type": "image_asset_pointer", "format": "png", "location": "s3://b/k"}]},
    ),
    ("SamplingParams", {"max_tokens": 8, "stop": ["\n"], "temperature": 0.7}),
    ("SamplingParams", {"stop": [13, 14], "seed": 3}),
    ("SamplingParams", {"stop": "END"}),
    (
        "SampleRequest",
        {
            "sampling_session_id": "s1",
            "seq_id": 2,
            "num_samples": 2,
            "prompt": {"chunks": [{"tokens": [1, 2, 3]}]},
            "sampling_params": {"max_tokens": 1},
            "prompt_logprobs": True,
            "topk_prompt_logprobs": 0,
        },
    ),
    (
        "SampleResponse",
        {
            "sequences": [{"stop_reason": "length", "tokens": [4], "logprobs": [-0.5]}],
            "prompt_logprobs": [None, -1.25, -2.5],
            "topk_prompt_logprobs": [None, [[7, -0.5], [8, -1.5]]],
            "prompt_cache_hit_tokens": 2,
        },
    ),
    (
        "ForwardBackwardOutput",
        {
            "loss_fn_output_type": "ArrayRecord",
            "loss_fn_outputs": [{"logprobs": {"data": [-1.0, -2.0], "dtype": "float32"}}],
            "metrics": {"loss:sum": 3.0},
        },
    ),
    (
        "OptimStepRequest",
        {
            "model_id": "m1",
            "seq_id": 3,
            "adam_params": {"learning_rate": 0.001, "grad_clip_norm": 1},
        },
    ),
    ("OptimStepResponse", {"metrics": {"grad_norm:mean": 0.5}}),
    ("CreateSessionRequest", {"tags": ["a"], "user_metadata": {"k": "v"}, "sdk_version": "0.24.1"}),
    ("CreateSessionResponse", {"session_id": "sess", "warning_message": "slow"}),
    (
        "CreateModelRequest",
        {
            "session_id": "sess",
            "model_seq_id": 0,
            "base_model": "HuggingFaceTB/SmolLM2-135M",
            "lora_config": {"rank": 8, "seed": 1, "train_unembed": False},
        },
    ),
    (
        "GetInfoResponse",
        {"model_id": "m1", "model_data": {"model_name": "x", "arch": "llama"}, "is_lora": True},
    ),
    ("SaveWeightsRequest", {"model_id": "m1", "seq_id": 4, "path": "step-1", "ttl_seconds": 60}),
    ("SaveWeightsForSamplerRequest", {"model_id": "m1", "seq_id": 5, "sampling_session_seq_id": 0}),
    ("SaveWeightsForSamplerResponseInternal", {"sampling_session_id": "s1"}),
    (
        "LoadWeightsRequest",
        {"model_id": "m1", "seq_id": 1, "path": "tinker://m1/weights/a", "optimizer": True},
    ),
    ("WeightsInfoResponse", {"base_model": "b", "is_lora": True, "lora_rank": 8}),
    (
        "CreateSamplingSessionRequest",
        {"session_id": "sess", "sampling_session_seq_id": 0, "base_model": "b"},
    ),
    ("FutureRetrieveRequest", {"request_id": "r1"}),
    ("TryAgainResponse", {"type": "try_again", "request_id": "r1", "queue_state": "active"}),
    ("RequestFailedResponse", {"error": "bad input", "category": "user"}),
    (
        "GetServerCapabilitiesResponse",
        {"supported_models": [{"model_name": "b", "max_context_length": 2048}]},
    ),
    ("HealthResponse", {"status": "ok"}),
    ("ClientConfigRequest", {"sdk_version": "0.24.1"}),
    ("ClientConfigResponse", {"use_pyqwest_transport": False}),
    (
        "TrainingRunsResponse",
        {
            "training_runs": [
                {
                    "training_run_id": "m1",
                    "base_model": "b",
                    "model_owner": "alice",
                    "is_lora": True,
                    "lora_rank": 8,
                    "last_request_time": "2025-01-02T03:04:05Z",
                    "last_checkpoint": {
                        "checkpoint_id": "weights/a",
                        "checkpoint_type": "training",
                        "time": "2025-01-02T03:04:05Z",
                        "tinker_path": "tinker://m1/weights/a",
                    },
                }
            ],
            "cursor": {"offset": 0, "limit": 20, "total_count": 1},
        },
    ),
]
CLASSES = {ours.__name__: (ours, theirs) for ours, theirs in PAIRS}


@pytest.mark.parametrize(("name", "payload"), PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_bodies_cross_validate(name: str, payload: dict[str, Any]) -> None:
    ours, theirs = CLASSES[name]
    from_tinker = _wire(theirs.model_validate(payload))
    from_us = _wire(ours.model_validate(payload))
    assert from_us == from_tinker
    assert _wire(ours.model_validate(from_tinker)) == from_tinker
    assert _wire(theirs.model_validate(from_us)) == from_us


def test_create_session_body_without_metadata() -> None:
    body = _wire(tt.CreateSessionRequest(tags=[], user_metadata=None, sdk_version="0.24.1"))
    assert "user_metadata" not in body  # so a server must not require the key
    assert lw.CreateSessionRequest.model_validate(body).user_metadata is None


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
def test_forward_backward_body_from_the_tinker_client() -> None:
    torch = pytest.importorskip("torch")
    weights = torch.zeros(4, 6)
    weights[0, 1] = 1.0
    datum = tt.Datum(
        model_input=tt.ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": np.array([2, 3, 4]), "weights": weights},
    )
    request = tt.ForwardBackwardRequest(
        forward_backward_input=tt.ForwardBackwardInput(data=[datum], loss_fn="cross_entropy"),
        model_id="m1",
        seq_id=1,
    )
    body = _wire(pydantic_conv.to_pydantic_request(request))
    ours = lw.ForwardBackwardRequest.model_validate(body)
    inputs = ours.forward_backward_input.data[0].loss_fn_inputs
    assert inputs["weights"].is_sparse  # tinker encodes a mostly-zero 2-D weight matrix as CSR
    np.testing.assert_array_equal(inputs["weights"].to_numpy(), weights.numpy())
    assert inputs["target_tokens"].tolist() == [2, 3, 4]
    assert _wire(ours) == body


def test_tinker_client_reads_our_results() -> None:
    output = lw.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[{"logprobs": lw.TensorData(data=[-1.0, -0.5], dtype="float32")}],
        metrics={"loss:sum": 1.5},
    )
    theirs = pydantic_conv.deserialize_json_response(
        output.model_dump(mode="json"), tt.ForwardBackwardOutput
    )
    assert theirs.metrics == {"loss:sum": 1.5}
    assert theirs.loss_fn_outputs[0]["logprobs"].tolist() == [-1.0, -0.5]

    sample = lw.SampleResponse(
        sequences=[lw.SampledSequence(stop_reason="stop", tokens=[5, 6], logprobs=[-0.1, -0.2])],
        prompt_logprobs=[None, -1.0],
    )
    read = pydantic_conv.deserialize_json_response(
        sample.model_dump(mode="json"), tt.SampleResponse
    )
    assert read.sequences[0].tokens == [5, 6]
    assert read.prompt_logprobs == [None, -1.0]
