"""Every wire type: JSON round-trips, documented fields, strict requests and lenient responses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from loopwright import types as lw
from loopwright.types._base import RequestModel, ResponseModel

TIME = "2025-01-02T03:04:05Z"
CHECKPOINT = {
    "checkpoint_id": "sampler_weights/s1",
    "checkpoint_type": "sampler",
    "time": TIME,
    "tinker_path": "tinker://m1/sampler_weights/s1",
    "size_bytes": 1024,
    "public": True,
    "expires_at": TIME,
}
PROMPT = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]}
DATUM = {
    "model_input": PROMPT,
    "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64", "shape": [3]}},
}
BASE_MODEL = {
    "name": "loopwright/tiny-byte-llama",
    "context_length": 512,
    "description": "a tiny test model",
    "chat_template": "{{ messages }}",
}
SESSION_INFO = {
    "session_id": "sess",
    "name": "grpo-gsm8k",
    "state": "active",
    "created_at": TIME,
    "last_heartbeat_at": TIME,
    "model_ids": ["m1"],
    "sampling_session_ids": ["s1"],
    "tags": ["t"],
    "user_metadata": {"a": 1},
    "placement": "waiting_for_network",
    "status_reason": "waiting for a worker that reaches subnet-0a1b2c3d with sg-0a1b2c3d: ...",
}
FB_INPUT = {"data": [DATUM], "loss_fn": "ppo", "loss_fn_config": {"clip_low_threshold": 0.8}}

PROMPT_SPAN = {"type": "prompt_tokens", "sequence_id": "req-1:0", "offset": 1, "length": 2}
SAMPLED_SPAN = {"type": "sampled_tokens", "sequence_id": "req-1:0", "offset": 0, "length": 1}

EXAMPLES: dict[str, dict[str, Any]] = {
    "ExternalWeightsUploadStartRequest": {
        "base_model": "b",
        "lora_config": {"rank": 8},
        "destination_project_id": "default",
    },
    "ExternalWeightsUploadStartResponse": {
        "upload_id": "upload-1",
        "urls": {"adapter_model.safetensors": "https://x/1"},
        "expires": TIME,
    },
    "ExternalWeightsUploadFinishRequest": {"upload_id": "upload-1"},
    "ExternalWeightsUploadFinishResponse": {"tinker_path": "tinker://m/sampler_weights/u"},
    "PromptProvenanceSpan": PROMPT_SPAN,
    "SampledProvenanceSpan": SAMPLED_SPAN,
    "TensorData": {"data": [0.5], "dtype": "float32", "shape": [1, 1]},
    "EncodedTextChunk": {"tokens": [1], "type": "encoded_text"},
    "ImageChunk": {
        "data": "aGk=",
        "format": "png",
        "expected_tokens": 3,
        "override_dimensions": {"width": 4, "height": 2},
        "type": "image",
    },
    "ImageDimensions": {"width": 640, "height": 480},
    "ImageAssetPointerChunk": {
        "format": "jpeg",
        "location": "s3://b/k",
        "type": "image_asset_pointer",
    },
    "ModelInput": PROMPT,
    "Datum": DATUM,
    "ForwardBackwardInput": FB_INPUT,
    "ForwardBackwardOutput": {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": [{"logprobs": {"data": [-1.0], "dtype": "float32"}}],
        "metrics": {"loss:sum": 1.0},
    },
    "ForwardRequest": {"forward_input": FB_INPUT, "model_id": "m1", "seq_id": 1},
    "ForwardBackwardRequest": {"forward_backward_input": FB_INPUT, "model_id": "m1", "seq_id": 2},
    "AdamParams": {"learning_rate": 0.001, "weight_decay": 0.01, "grad_clip_norm": 1.0},
    "AdamOptimizerConfig": {"type": "adamw"},
    "DimuonOptimizerConfig": {"type": "dimuon", "version": 1},
    "DimuonParams": {"type": "dimuon", "learning_rate": 0.01, "grad_clip_norm": 1.0, "beta1": 0.9},
    "OptimStepRequest": {"adam_params": {}, "model_id": "m1", "seq_id": 3, "type": "optim_step"},
    "OptimStepResponse": {"metrics": {"grad_norm:mean": 0.1}},
    "LoraConfig": {"rank": 16, "seed": 0, "train_unembed": False},
    "SamplingParams": {"max_tokens": 16, "stop": [2], "top_k": 50, "top_p": 0.9},
    "SampleRequest": {
        "prompt": PROMPT,
        "sampling_params": {"max_tokens": 1},
        "sampling_session_id": "s1",
        "seq_id": 0,
        "prompt_logprobs": True,
        "topk_sample_logprobs": 2,
        "target_prompt_logprobs": {
            "data": [5],
            "dtype": "int64",
            "shape": [2, 3],
            "sparse_crow_indices": [0, 0, 1],
            "sparse_col_indices": [2],
        },
        "prompt_alt_tokens_k": 2,
        "prompt_logprobs_last_n": 1,
        "record_stability_info": False,
    },
    "SampledSequence": {
        "stop_reason": "stop",
        "tokens": [7],
        "logprobs": [-0.25],
        "topk_logprobs": [[[7, -0.25], [9, -2.0]]],
    },
    "PromptAltTokens": {
        "tokens": {"data": [4, 4], "dtype": "int64", "shape": [1, 2]},
        "logprobs": {"data": [-0.5, -0.5], "dtype": "float32", "shape": [1, 2]},
    },
    "SampleResponse": {
        "sequences": [{"stop_reason": "length", "tokens": [1, 2]}],
        "type": "sample",
        "prompt_logprobs": [None, -1.5],
        "topk_prompt_logprobs": [None, [[3, -0.5]]],
        "prompt_cache_hit_tokens": 0,
        "target_prompt_logprobs": {"data": [-1.25, 0.0], "dtype": "float32", "shape": [1, 2]},
        "prompt_alt_tokens": {
            "tokens": {"data": [4], "dtype": "int64", "shape": [1, 1]},
            "logprobs": {"data": [-0.5], "dtype": "float32", "shape": [1, 1]},
        },
    },
    "CreateSessionRequest": {"tags": ["t"], "user_metadata": {"a": 1}, "sdk_version": "0.24.1"},
    "CreateSessionResponse": {"session_id": "sess", "type": "create_session"},
    "SessionHeartbeatRequest": {"session_id": "sess", "type": "session_heartbeat"},
    "SessionHeartbeatResponse": {"type": "session_heartbeat"},
    "GetSessionResponse": {"training_run_ids": ["m1"], "sampler_ids": ["s1"]},
    "ListSessionsResponse": {"sessions": ["sess"]},
    "CreateSamplingSessionRequest": {
        "session_id": "sess",
        "sampling_session_seq_id": 0,
        "model_path": "tinker://m1/sampler_weights/s1",
    },
    "CreateSamplingSessionResponse": {"sampling_session_id": "s1"},
    "GetSamplerResponse": {"sampler_id": "s1", "base_model": "b"},
    "CreateModelRequest": {
        "session_id": "sess",
        "model_seq_id": 0,
        "base_model": "b",
        "lora_config": {"rank": 8},
        "optimizer_config": {"type": "adamw"},
    },
    "CreateModelResponse": {"model_id": "m1", "type": "create_model"},
    "GetInfoRequest": {"model_id": "m1"},
    "ModelData": {"arch": "llama", "model_name": "/models/smollm2"},
    "GetInfoResponse": {
        "model_id": "m1",
        "model_data": {"model_name": "/models/smollm2"},
        "is_lora": True,
        "lora_rank": 8,
    },
    "UnloadModelRequest": {"model_id": "m1"},
    "UnloadModelResponse": {"model_id": "m1"},
    "SaveWeightsRequest": {"model_id": "m1", "seq_id": 4, "path": "step-1"},
    "SaveWeightsResponse": {"path": "tinker://m1/weights/step-1"},
    "SaveWeightsForSamplerRequest": {"model_id": "m1", "seq_id": 5, "path": "s1"},
    "SaveWeightsExternalRequest": {
        "model_id": "m1",
        "seq_id": 6,
        "path": "e1",
        "ttl_seconds": 3600,
    },
    "SaveWeightsForSamplerResponse": {"path": "tinker://m1/sampler_weights/s1"},
    "CopyWeightsRequest": {
        "source_path": "tinker://m1/weights/step-1",
        "session_id": "s1",
        "model_seq_id": 2,
        "ttl_seconds": 7200,
    },
    "CopyWeightsResponse": {"tinker_path": "tinker://m2/weights/step-1"},
    "SaveWeightsForSamplerResponseInternal": {"sampling_session_id": "s2"},
    "LoadWeightsRequest": {
        "model_id": "m1",
        "seq_id": 1,
        "path": "tinker://m1/weights/a",
        "optimizer": False,
    },
    "LoadWeightsResponse": {"path": "tinker://m1/weights/a"},
    "WeightsInfoRequest": {"tinker_path": "tinker://m1/weights/a"},
    "WeightsInfoResponse": {"base_model": "b", "is_lora": True, "lora_rank": 8, "train_mlp": True},
    "UntypedAPIFuture": {"request_id": "r1", "model_id": "m1"},
    "FutureRetrieveRequest": {"request_id": "r1"},
    "TryAgainResponse": {"type": "try_again", "request_id": "r1", "queue_state": "paused_capacity"},
    "RequestFailedResponse": {"error": "boom", "category": "server"},
    "HealthResponse": {"status": "ok"},
    "SupportedModel": {"model_name": "b"},
    "GetServerCapabilitiesResponse": {
        "supported_models": [{"model_name": "b", "max_context_length": 8192}]
    },
    "ClientConfigRequest": {"sdk_version": "0.24.1"},
    "ClientConfigResponse": {"use_pyqwest_transport": False},
    "ClientDynamicConfigResponse": {"refresh_interval_sec": 300, "sample_cancel_enabled": False},
    "Cursor": {"offset": 0, "limit": 20, "total_count": 0},
    "Checkpoint": CHECKPOINT,
    "CheckpointsListResponse": {"checkpoints": [CHECKPOINT]},
    "ParsedCheckpointTinkerPath": {
        "tinker_path": "tinker://m1/weights/a",
        "training_run_id": "m1",
        "checkpoint_type": "training",
        "checkpoint_id": "weights/a",
    },
    "TrainingRun": {
        "training_run_id": "m1",
        "base_model": "b",
        "model_owner": "alice",
        "is_lora": True,
        "last_request_time": TIME,
        "last_sampler_checkpoint": CHECKPOINT,
    },
    "TrainingRunsResponse": {
        "training_runs": [],
        "cursor": {"offset": 0, "limit": 20, "total_count": 0},
    },
    # Loopwright's own endpoints
    "BaseModelInfo": BASE_MODEL,
    "ListBaseModelsResponse": {"base_models": [BASE_MODEL]},
    "TokenizerFilesResponse": {"base_model": "b", "files": {"tokenizer.json": "{}"}},
    "SessionInfo": SESSION_INFO,
    "ListSessionInfosResponse": {"sessions": [SESSION_INFO]},
    "ErrorBody": {"detail": "rank must be positive", "code": "invalid", "field": "rank"},
    "VpcConfig": {"subnets": ["subnet-0a1b2c3d"], "security_group_ids": ["sg-0a1b2c3d"]},
    "QueueStatus": {
        "position": 2,
        "waiting": 5,
        "waits_for": "capacity",
        "base_model": "b",
        "network": "open network",
        "replicas": 1,
        "reason": "waiting for a free slot on an open-network worker: 1 serves b, it is full",
        "queued_at": TIME,
        "estimated_start_at": TIME,
        "estimate_basis": "models of b held a slot 60 s on average (the last 3 that ended)",
        "kind": "model",
    },
}

MODELS: dict[str, type[BaseModel]] = {
    name: obj
    for name in lw.__all__
    if isinstance(obj := getattr(lw, name), type) and issubclass(obj, BaseModel)
}


def test_every_model_has_an_example() -> None:
    assert set(MODELS) == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_json_round_trip(name: str) -> None:
    cls = MODELS[name]
    obj = cls.model_validate_json(json.dumps(EXAMPLES[name]))
    again = cls.model_validate_json(obj.model_dump_json())
    assert again == obj
    _assert_contains(_normalise(obj.model_dump(mode="json")), _normalise(EXAMPLES[name]))


def _assert_contains(dumped: Any, given: Any) -> None:
    """Every value that was given comes back (defaults may be added around it)."""
    if isinstance(given, dict):
        for key, value in given.items():
            _assert_contains(dumped[key], value)
    elif isinstance(given, list):
        assert len(dumped) == len(given)
        for d, g in zip(dumped, given, strict=True):
            _assert_contains(d, g)
    else:
        assert dumped == given


def _normalise(value: Any) -> Any:
    """JSON-compare, reading "Z" and "+00:00" as the same instant and tuples as lists."""
    return json.loads(json.dumps(value).replace("+00:00", "Z"))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_field_is_documented(name: str) -> None:
    for field_name, field in MODELS[name].model_fields.items():
        assert field.description, f"{name}.{field_name}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_requests_forbid_and_responses_ignore_unknown_fields(name: str) -> None:
    cls = MODELS[name]
    body = {**EXAMPLES[name], "not_a_field": 1}
    if issubclass(cls, RequestModel):
        with pytest.raises(ValidationError, match="not_a_field"):
            cls.model_validate(body)
    else:
        assert issubclass(cls, ResponseModel)
        assert not hasattr(cls.model_validate(body), "not_a_field")


def test_defaults_match_the_protocol() -> None:
    assert lw.AdamParams().model_dump() == {
        "learning_rate": 1e-4,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-12,
        "weight_decay": 0.0,
        "grad_clip_norm": 0.0,
    }
    params = lw.SamplingParams()
    assert (params.max_tokens, params.temperature, params.top_k, params.top_p) == (None, 1, -1, 1)
    lora = lw.LoraConfig(rank=4)
    assert (lora.train_unembed, lora.train_mlp, lora.train_attn, lora.seed) == (
        True,
        True,
        True,
        None,
    )
    assert lw.SampleResponse(sequences=[]).prompt_cache_hit_tokens == 0
    assert lw.ClientConfigResponse().model_dump()["use_pyqwest_transport"] is False


def test_stop_accepts_strings_and_token_ids() -> None:
    assert lw.SamplingParams(stop="\n").stop == "\n"
    assert lw.SamplingParams.model_validate({"stop": ["a", "b"]}).stop == ["a", "b"]
    assert lw.SamplingParams.model_validate({"stop": [1, 2]}).stop == [1, 2]


def test_try_again_and_failure_bodies() -> None:
    pending = lw.TryAgainResponse.model_validate({"type": "try_again", "request_id": "r1"})
    assert pending.queue_state is None
    with pytest.raises(ValidationError):
        lw.RequestFailedResponse.model_validate({"error": "x", "category": "cosmic"})


def test_parse_checkpoint_path() -> None:
    parsed = lw.ParsedCheckpointTinkerPath.from_tinker_path("tinker://m1/sampler_weights/final")
    assert (parsed.training_run_id, parsed.checkpoint_type, parsed.checkpoint_id) == (
        "m1",
        "sampler",
        "sampler_weights/final",
    )
    for bad in [
        "m1/weights/a",
        "tinker://m1/other/a",
        "tinker://m1/weights",
        "tinker:///weights/a",
    ]:
        with pytest.raises(ValueError, match="not a tinker checkpoint path"):
            lw.ParsedCheckpointTinkerPath.from_tinker_path(bad)


def test_package_reexports_types() -> None:
    import loopwright

    assert loopwright.__version__ == "0.1.0"
    assert loopwright.Datum is lw.Datum
    assert set(lw.__all__) <= set(loopwright.__all__)
