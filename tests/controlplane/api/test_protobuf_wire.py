"""The protobuf half of the protocol (tinker SDK ≥ 0.25): forward_backward bodies, forward_only,
results as protobuf, and every way a body can be wrong (a 4xx naming it, never a 5xx, and the
model goes on working). charlie, another tenant, gets 404 for alice's ids."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard

from loopwright.proto import pb
from loopwright.proto.fwdbwd import encode_forward_backward
from loopwright.types import ForwardBackwardInput
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db

PROTO = "application/x-protobuf"


def batch(n: int = 2, length: int = 6, loss_fn: str = "cross_entropy") -> ForwardBackwardInput:
    data = [datum(list(range(i, i + length))) for i in range(n)]
    return ForwardBackwardInput.model_validate({"data": data, "loss_fn": loss_fn})


def post_proto(person, body: bytes, *, encoding: str | None = "zstd", path="forward_backward"):
    headers = {"HTTP_CONTENT_ENCODING": encoding} if encoding else {}
    return person.client.post(f"/api/v1/{path}", body, content_type=PROTO, **headers)


def raw_message(model_id: str, seq_id: int, **fields) -> pb.ForwardBackwardRequest:
    return pb.ForwardBackwardRequest(model_id=model_id, seq_id=seq_id, **fields)


def retrieve_proto(person, runtime, fut: dict):
    runtime.drain()
    return person.client.post(
        "/api/v1/retrieve_future",
        {"request_id": fut["request_id"]},
        format="json",
        HTTP_ACCEPT=PROTO,
    )


@pytest.fixture
def model(alice, runtime) -> str:
    return create_model(alice, runtime, open_session(alice))


def test_protobuf_forward_backward_matches_json_and_answers_protobuf(alice, runtime, model):
    fb = batch()
    r = post_proto(alice, encode_forward_backward(model, 1, fb))
    assert r.status_code == 200, r.content
    answer = retrieve_proto(alice, runtime, r.json())
    assert answer["Content-Type"] == PROTO
    out = pb.ForwardBackwardOutput.FromString(answer.content)
    assert out.loss_fn_outputs[0].num_datums == 2 and "loss:sum" in out.metrics
    # the same request as JSON, on the same route, gives the same numbers
    as_json = alice.post("forward_backward", fwdbwd(model, 2, fb.model_dump(mode="json")["data"]))
    again = result(alice, runtime, as_json.json())
    assert again["metrics"]["loss:sum"] == pytest.approx(out.metrics["loss:sum"], rel=1e-6)
    record = out.loss_fn_outputs[0].fields["logprobs"]
    logprobs = np.frombuffer(record.data, "<f4")
    expected = np.concatenate([o["logprobs"]["data"] for o in again["loss_fn_outputs"]])
    np.testing.assert_allclose(logprobs, expected, rtol=1e-6)
    # without Accept the same future answers JSON
    r = alice.post("retrieve_future", {"request_id": as_json.json()["request_id"]})
    assert r["Content-Type"].startswith("application/json")


def test_forward_only_runs_as_a_forward(alice, runtime, model):
    body = encode_forward_backward(model, 1, batch(), forward_only=True)
    r = post_proto(alice, body)
    assert r.status_code == 200, r.content
    from controlplane.training_sessions.models import Operation

    assert Operation.objects.get(pk=r.json()["request_id"]).kind == Operation.Kind.FORWARD
    out = pb.ForwardBackwardOutput.FromString(retrieve_proto(alice, runtime, r.json()).content)
    assert out.metrics["loss:sum"] > 0


def test_uncompressed_and_alias_media_type_are_taken(alice, runtime, model):
    plain = zstandard.ZstdDecompressor().decompress(encode_forward_backward(model, 1, batch()))
    r = alice.client.post("/api/v1/forward_backward", plain, content_type="application/protobuf")
    assert r.status_code == 200, r.content


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda m: b"\xff\xff\xff\xff not protobuf", None),
        (lambda m: encode_forward_backward(m, 1, batch())[:-7], "Content-Encoding"),
        (lambda m: b"this is no zstd frame", "Content-Encoding"),
    ],
    ids=["malformed", "truncated-zstd", "not-zstd"],
)
def test_broken_bodies_are_400_and_the_model_goes_on(alice, runtime, model, make, field):
    body = make(model)
    encoding = None if body.startswith(b"\xff") else "zstd"
    r = post_proto(alice, body, encoding=encoding)
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field and r.json()["detail"]
    # the seq_id was not taken: the same seq_id with a good body runs
    r = post_proto(alice, encode_forward_backward(model, 1, batch()))
    assert r.status_code == 200, r.content
    assert result(alice, runtime, r.json())["metrics"]["loss:sum"] > 0


def test_decompressed_size_is_capped(alice, runtime, model, settings):
    settings.MAX_REQUEST_BYTES = 4096
    big = encode_forward_backward(model, 1, batch(n=8, length=200))
    assert len(big) < 4096  # small on the wire, over the limit once decompressed
    r = post_proto(alice, big)
    assert r.status_code == 413, r.content
    assert "4096" in r.json()["detail"] and r.json()["code"] == "payload_too_large"
    # a frame without its size in the header is cut off at the limit too
    raw = zstandard.ZstdDecompressor().decompress(big)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    assert post_proto(alice, streamed).status_code == 413


def _with_tensor(model: str, seq: int, name: str, tensor: pb.Tensor) -> bytes:
    msg = pb.ForwardBackwardRequest.FromString(
        zstandard.ZstdDecompressor().decompress(encode_forward_backward(model, seq, batch(n=1)))
    )
    msg.data[0].loss_fn_inputs[name].CopyFrom(tensor)
    return msg.SerializeToString()


@pytest.mark.parametrize(
    ("tensor", "field"),
    [
        (pb.Tensor(dense=b"\x00" * 10, dtype=pb.DTYPE_FLOAT32), "weights.data"),
        (pb.Tensor(dense=b"\x00" * 8, dtype=pb.DTYPE_UNSPECIFIED), "weights"),
        (
            pb.Tensor(dense=np.ones(6, "<f4").tobytes(), dtype=pb.DTYPE_FLOAT32, shape=[4]),
            "weights",
        ),
        (
            pb.Tensor(dense=np.full(6, np.nan, "<f4").tobytes(), dtype=pb.DTYPE_FLOAT32),
            "weights.data",
        ),
        (pb.Tensor(dense=np.ones(6, "<i8").tobytes(), dtype=99), "weights"),
    ],
    ids=["odd-bytes", "no-dtype", "shape-mismatch", "nan", "unknown-dtype"],
)
def test_bad_tensors_are_4xx_naming_them_and_take_their_seq_id(
    alice, runtime, model, tensor, field
):
    r = post_proto(alice, _with_tensor(model, 1, "weights", tensor), encoding=None)
    assert 400 <= r.status_code < 500, r.content
    if field is not None:
        assert r.json()["field"].endswith(field), r.json()
    runtime.drain()
    # refused on arrival, its seq_id is used up: the next one runs, nothing waits for it
    r = post_proto(alice, encode_forward_backward(model, 2, batch()))
    assert r.status_code == 200, r.content
    assert "metrics" in result(alice, runtime, r.json())


def test_unknown_and_custom_losses_are_refused(alice, runtime, model):
    msg = raw_message(model, 1, loss_fn="custom")
    r = post_proto(alice, msg.SerializeToString(), encoding=None)
    assert r.status_code == 400 and "forward_backward_custom" in r.json()["detail"]
    msg = raw_message(model, 2, loss_fn="no_such_loss")
    r = post_proto(alice, msg.SerializeToString(), encoding=None)
    assert r.status_code == 400 and r.json()["field"] == "forward_backward_input.loss_fn"


def test_other_tenant_gets_404(alice, charlie, runtime, model):
    r = post_proto(charlie, encode_forward_backward(model, 1, batch()))
    assert r.status_code == 404, r.content
    mine = post_proto(alice, encode_forward_backward(model, 1, batch()))
    r = retrieve_proto(charlie, runtime, mine.json())
    assert r.status_code == 404, r.content


def test_sample_futures_carry_sequence_ids_and_answer_protobuf(alice, runtime, model):
    session = alice.post("get_info", {"model_id": model}).json()["session_id"]
    sampler = alice.post(
        "create_sampling_session",
        {
            "session_id": session,
            "sampling_session_seq_id": 0,
            "base_model": "loopwright/tiny-byte-llama",
        },
    ).json()["sampling_session_id"]
    body = {
        "sampling_session_id": sampler,
        "seq_id": 0,
        "num_samples": 2,
        "prompt": {"chunks": [{"tokens": [1, 2, 3, 4]}]},
        "sampling_params": {"max_tokens": 3, "seed": 5, "stop": []},
        "prompt_logprobs": True,
        "topk_prompt_logprobs": 2,
        "topk_sample_logprobs": 2,
    }
    fut = alice.post("asample", body).json()
    ids = fut["sample_sequence_ids"]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert alice.post("asample", body).json()["sample_sequence_ids"] == ids  # a retry
    out = pb.SampleResponse.FromString(retrieve_proto(alice, runtime, fut).content)
    assert len(out.sequences) == 2 and out.sequences[0].topk_sampled_logprobs.k == 2
    prompt_lp = np.frombuffer(out.prompt_logprobs, "<f4")
    assert np.isnan(prompt_lp[0]) and np.isfinite(prompt_lp[1:]).all()
    as_json = result(alice, runtime, fut)
    assert [s["sequence_id"] for s in as_json["sequences"]] == ids
    assert len(as_json["sequences"][0]["topk_logprobs"][0]) == 2


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"topk_sample_logprobs": 21}, "topk_sample_logprobs"),
        ({"prompt_alt_tokens_k": -1}, "prompt_alt_tokens_k"),
        ({"prompt_logprobs_last_n": 2}, "prompt_logprobs_last_n"),
        ({"prompt_logprobs": True, "prompt_logprobs_last_n": 4}, "prompt_logprobs_last_n"),
        (
            {"target_prompt_logprobs": {"data": [1, 2, 3], "dtype": "int64", "shape": [3, 1]}},
            None,
        ),
        (
            {"target_prompt_logprobs": {"data": [1, 2], "dtype": "int64", "shape": [2, 1]}},
            "target_prompt_logprobs",
        ),
        ({"record_stability_info": True}, None),
    ],
)
def test_new_sampling_options_are_checked(alice, runtime, model, extra, field):
    session = alice.post("get_info", {"model_id": model}).json()["session_id"]
    sampler = alice.post(
        "create_sampling_session",
        {"session_id": session, "sampling_session_seq_id": 0, "model_id": model},
    ).json()["sampling_session_id"]
    body = {
        "sampling_session_id": sampler,
        "num_samples": 1,
        "prompt": {"chunks": [{"tokens": [1, 2, 3, 4]}]},
        "sampling_params": {"max_tokens": 2},
        **extra,
    }
    r = alice.post("asample", body)
    if field is None:  # within the limits: taken, and served
        assert r.status_code == 200, r.content
        assert "sequences" in result(alice, runtime, r.json())
        return
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field
    # the same request without the option is taken
    r = alice.post("asample", {k: v for k, v in body.items() if k not in extra})
    assert r.status_code == 200, r.content


def test_client_config_and_create_model_optimizer(alice, charlie, runtime):
    config = alice.post("client/config", {"sdk_version": "0.38.0"}).json()
    assert config["proto_compress_fwdbwd"] is True and config["proto_write_fwdbwd"] is False
    assert config["use_pyqwest_transport"] is False
    dynamic = alice.post("client/dynamic_config", {"sdk_version": "0.38.0"}).json()
    assert dynamic["sample_cancel_enabled"] is False
    session = open_session(alice)
    base = {"session_id": session, "base_model": "loopwright/tiny-byte-llama"}
    r = alice.post(
        "create_model", {**base, "model_seq_id": 0, "optimizer_config": {"type": "adamw"}}
    )
    assert r.status_code == 200, r.content
    r = alice.post(
        "create_model",
        {**base, "model_seq_id": 1, "optimizer_config": {"type": "dimuon", "version": 1}},
    )
    assert r.status_code == 200, r.content
    r = alice.post("create_model", {**base, "model_seq_id": 3, "optimizer_config": {"type": "sgd"}})
    assert r.status_code == 400 and r.json()["field"] == "optimizer_config"
    assert "unknown optimizer 'sgd'" in r.json()["detail"]
    r = charlie.post(
        "create_model", {**base, "model_seq_id": 2, "optimizer_config": {"type": "adamw"}}
    )
    assert r.status_code == 404


def test_inputs_of_another_length_fail_the_future_as_the_callers_and_the_model_goes_on(
    alice, runtime, model
):
    short = pb.Tensor(dense=np.ones(3, "<f4").tobytes(), dtype=pb.DTYPE_FLOAT32)
    r = post_proto(alice, _with_tensor(model, 1, "weights", short), encoding=None)
    assert r.status_code == 200, r.content
    failed = result(alice, runtime, r.json())
    assert failed["category"] == "user" and "weights" in failed["error"]
    r = post_proto(alice, encode_forward_backward(model, 2, batch()))
    assert "metrics" in result(alice, runtime, r.json())


def test_a_protobuf_only_caller_that_prefers_to_wait_gets_the_handle_alone(alice, runtime, model):
    body = encode_forward_backward(model, 1, batch())
    r = alice.client.post(
        "/api/v1/forward_backward",
        body,
        content_type=PROTO,
        HTTP_CONTENT_ENCODING="zstd",
        HTTP_PREFER="wait=5",
        HTTP_ACCEPT=PROTO,
    )
    assert r.status_code == 200 and r["Content-Type"].startswith("application/json")
    fut = r.json()  # not NDJSON: the outcome is retrieved, as protobuf
    out = pb.ForwardBackwardOutput.FromString(retrieve_proto(alice, runtime, fut).content)
    assert out.metrics["loss:sum"] > 0
