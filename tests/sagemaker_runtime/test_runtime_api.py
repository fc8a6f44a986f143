"""The runtime face in process, driven by boto3's own runtime client (botocore parses every
answer with the service model): every operation kind, ordering and retries, token usage against
the bill, and the same work through the Tinker face giving the same numbers."""

from __future__ import annotations

import json

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.metering.models import Meter, UsageRecord
from controlplane.training_sessions.models import Operation
from tests.support.wire import create_model, fwdbwd, open_session, result

from .sessions import SHORT, prompt, tokens_datum

pytestmark = pytest.mark.django_db

BATCH = [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10]]


def execute(client, ts: str, seq: int, config: dict, token: str | None = None) -> str:
    extra = {"clientToken": token} if token else {}
    out = client.execute_training_operation(
        trainingSessionName=ts, sequenceNumber=seq, operationConfig=config, **extra
    )
    return out["operationId"]


def get(client, ts: str, operation_id: str, runtime) -> dict:
    runtime.drain()
    out = client.get_training_operation_result(trainingSessionName=ts, operationId=operation_id)
    assert out["ResponseMetadata"]["HTTPStatusCode"] == 200
    return out


def sample_op(client, ts: str, config: dict, runtime) -> dict:
    op = client.execute_sampling_operation(trainingSessionName=ts, operationConfig=config)
    runtime.drain()
    return client.get_sampling_operation_result(
        trainingSessionName=ts, operationId=op["operationId"]
    )


def fb_config(loss: str = "cross_entropy") -> dict:
    return {"forwardBackward": {"lossFnName": loss, "datumList": [tokens_datum(t) for t in BATCH]}}


ADAM = {"optimizerStep": {"adamParamsConfig": {"learningRate": 0.005, "beta2": 0.95}}}


def test_a_training_loop_through_boto3(alice, ts, runtime) -> None:
    sm = alice.sm
    fb = execute(sm, ts, 1, fb_config(), token="t-1")
    opt = execute(sm, ts, 2, ADAM, token="t-2")
    saved = execute(sm, ts, 3, {"saveWeights": {"description": "step 1"}})
    state = execute(sm, ts, 4, {"saveState": {}})

    out = get(sm, ts, fb, runtime)
    assert out["status"] == "Completed"
    result_fb = out["operationResult"]["forwardBackward"]
    tokens = sum(len(t) for t in BATCH)
    assert out["tokenUsage"] == result_fb["tokenUsage"] == {"trainingTokens": tokens}
    assert [len(o["logprobs"]["data"]) for o in result_fb["lossFnOutputs"]] == [6, 4]
    loss = -sum(sum(o["logprobs"]["data"]) for o in result_fb["lossFnOutputs"])
    assert result_fb["metrics"]["loss:sum"] == pytest.approx(loss, rel=1e-5)
    assert get(sm, ts, opt, runtime)["operationResult"]["optimizerStep"]["metrics"]
    arn = get(sm, ts, saved, runtime)["operationResult"]["saveWeights"]["modelPackageArn"]
    state_arn = get(sm, ts, state, runtime)["operationResult"]["saveState"]["modelPackageArn"]
    assert arn.startswith("arn:loopwright:registry::") and arn != state_arn

    # the bill: one row per meter of each operation, equal to what botocore parsed
    billed = UsageRecord.objects.get(operation_id=fb, meter=Meter.TRAIN_TOKENS).quantity
    assert billed == tokens

    loaded = execute(
        sm, ts, 5, {"loadState": {"modelPackageArn": state_arn, "loadOptimizer": True}}
    )
    assert get(sm, ts, loaded, runtime)["operationResult"] == {"loadState": {}}

    load = sm.execute_sampling_operation(
        trainingSessionName=ts, operationConfig={"loadWeightsForSampling": {"modelPackageArn": arn}}
    )["operationId"]
    out = sm.get_sampling_operation_result(trainingSessionName=ts, operationId=load)
    assert out["status"] == "Completed"
    assert out["operationResult"] == {"loadWeightsForSampling": {}}

    sample = {
        "prompt": prompt([1, 2, 3]),
        "numSamples": 3,
        "samplingParams": {**SHORT, "seed": 7},
        "modelPackageArn": arn,
        "includePromptLogprobs": True,
        "topkPromptLogprobs": 2,
    }
    out = sample_op(sm, ts, {"sample": sample}, runtime)
    got = out["operationResult"]["sample"]
    assert len(got["sequences"]) == 3
    assert len(got["promptLogprobs"]) == 2 and len(got["topkPromptLogprobs"]) == 2
    assert all(len(row) == 2 for row in got["topkPromptLogprobs"])
    op = Operation.objects.get(kind=Operation.Kind.SAMPLE, payload__num_samples=3)
    usage = {u.meter: u.quantity for u in UsageRecord.objects.filter(operation=op)}
    seqs = got["sequences"]
    assert sum(s["tokenUsage"]["prefill"] for s in seqs) == usage[Meter.PREFILL_TOKENS] == 3
    assert sum(s["tokenUsage"]["decode"] for s in seqs) == usage[Meter.SAMPLED_TOKENS]
    assert all(s["tokenUsage"]["decode"] == len(s["tokens"]) for s in seqs)
    assert all(len(s["logprobs"]) == len(s["tokens"]) for s in seqs)

    out = sample_op(sm, ts, {"computeLogprobs": {"prompt": prompt([1, 2, 3, 4])}}, runtime)
    logprobs = out["operationResult"]["computeLogprobs"]["logprobs"]
    assert logprobs[0] is None and len(logprobs) == 4

    forward = execute(sm, ts, 6, {"forward": fb_config()["forwardBackward"]})
    out = get(sm, ts, forward, runtime)
    assert out["operationResult"]["forward"]["tokenUsage"] == {"trainingTokens": tokens}
    assert UsageRecord.objects.get(operation_id=forward, meter=Meter.FORWARD_TOKENS).quantity == (
        tokens
    )


def test_the_same_work_through_the_tinker_face_gives_the_same_numbers(alice, ts, runtime) -> None:
    """A Tinker model of the same seed, given the same steps, computes the same losses,
    logprobs and metrics, and is billed the same."""
    sm = alice.sm
    model = create_model(alice.api, runtime, open_session(alice.api))
    tinker_batch = [
        {
            "model_input": {"chunks": [{"type": "encoded_text", "tokens": t}]},
            "loss_fn_inputs": {
                "target_tokens": {"data": [(x + 1) % 256 for x in t], "dtype": "int64"},
                "weights": {"data": [1.0] * len(t), "dtype": "float32"},
            },
        }
        for t in BATCH
    ]
    ours, theirs = [], []
    for step in range(2):
        ours.append(execute(sm, ts, 2 * step + 1, fb_config()))
        execute(sm, ts, 2 * step + 2, ADAM)
        fut = alice.api.post("forward_backward", fwdbwd(model, 2 * step + 1, tinker_batch)).json()
        theirs.append(fut)
        alice.api.post(
            "optim_step",
            {
                "model_id": model,
                "seq_id": 2 * step + 2,
                "adam_params": {
                    "learning_rate": 0.005,
                    "beta1": 0.9,
                    "beta2": 0.95,
                    "eps": 1e-8,
                    "weight_decay": 0.01,
                },
            },
        )
    for op_id, fut in zip(ours, theirs, strict=True):
        got = get(sm, ts, op_id, runtime)["operationResult"]["forwardBackward"]
        want = result(alice.api, runtime, fut)
        assert got["metrics"] == pytest.approx(want["metrics"])
        for a, b in zip(got["lossFnOutputs"], want["loss_fn_outputs"], strict=True):
            assert a["logprobs"]["data"] == pytest.approx(b["logprobs"]["data"])
        billed = UsageRecord.objects.filter(operation_id__in=[op_id, fut["request_id"]])
        assert len({u.quantity for u in billed}) == 1 and billed.count() == 2


def test_rl_weights_are_folded_into_the_advantages(alice, ts, runtime) -> None:
    """ppo with a weights mask computes what the Tinker face computes with advantages × weights."""
    tokens = [3, 4, 5, 6, 7]
    weights = [0.0, 0.0, 1.0, 1.0, 0.5]
    advantages = [1.0, -2.0, 0.5, -1.0, 2.0]
    logprobs = [-5.0] * 5
    datum = tokens_datum(tokens, weights)
    datum["lossFnInputs"]["advantages"] = {"data": advantages, "dtype": "float32"}
    datum["lossFnInputs"]["logprobs"] = {"data": logprobs, "dtype": "float32"}
    fwd = {"forward": {"lossFnName": "ppo", "datumList": [datum]}}
    ours = get(alice.sm, ts, execute(alice.sm, ts, 1, fwd), runtime)
    model = create_model(alice.api, runtime, open_session(alice.api))
    body = {
        "model_id": model,
        "seq_id": 1,
        "forward_input": {
            "loss_fn": "ppo",
            "data": [
                {
                    "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
                    "loss_fn_inputs": {
                        "target_tokens": {"data": [t + 1 for t in tokens], "dtype": "int64"},
                        "advantages": {
                            "data": [a * w for a, w in zip(advantages, weights, strict=True)],
                            "dtype": "float32",
                        },
                        "logprobs": {"data": logprobs, "dtype": "float32"},
                    },
                }
            ],
        },
    }
    want = result(alice.api, runtime, alice.api.post("forward", body).json())
    got = ours["operationResult"]["forward"]
    assert got["metrics"]["loss:sum"] == pytest.approx(want["metrics"]["loss:sum"])


def test_operations_run_in_sequence_number_order_and_retries_get_the_same_one(
    alice, ts, runtime
) -> None:
    sm = alice.sm
    later = execute(sm, ts, 2, ADAM, token="b")
    first = execute(sm, ts, 1, fb_config(), token="a")
    assert execute(sm, ts, 1, fb_config(), token="a") == first  # the SDK's retry
    runtime.drain()
    ops = Operation.objects.filter(id__in=[first, later])
    assert {o.id: o.seq_id for o in ops} == {first: 1, later: 2}
    assert ops.get(id=first).finished_at <= ops.get(id=later).finished_at
    with pytest.raises(sm.exceptions.ConflictException, match="sequenceNumber 1 is behind"):
        execute(sm, ts, 1, ADAM, token="c")
    execute(sm, ts, 3, ADAM, token="d")
    with pytest.raises(sm.exceptions.ConflictException, match=r"sequenceNumber 3 .* already used"):
        execute(sm, ts, 3, fb_config(), token="d")


def test_decisions_are_audited_as_the_tinker_faces(alice, ts, runtime) -> None:
    execute(alice.sm, ts, 1, fb_config())
    event = AuditEvent.objects.filter(action="sessions:ForwardBackward").latest("id")
    assert event.allowed and event.resource.endswith(":model/" + _model_of(ts))


def _model_of(name: str) -> str:
    from controlplane.training_sessions.models import TrainingModel

    return TrainingModel.objects.get(session__name=name).id


def test_the_openai_shaped_passthrough(alice, ts, runtime) -> None:
    sm = alice.sm
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1}
    out = sm.sample_training_session(
        trainingSessionName=ts, body=json.dumps(body), contentType="application/json"
    )
    answer = json.loads(out["body"].read())
    assert answer["object"] == "chat.completion"
    assert answer["usage"]["completion_tokens"] <= 4
    completion = {"prompt": [1, 2, 3], "max_tokens": 3, "seed": 1}
    out = sm.sample_training_session(trainingSessionName=ts, body=json.dumps(completion))
    assert json.loads(out["body"].read())["object"] == "text_completion"


def test_the_passthrough_samples_the_version_the_header_names(alice, ts, runtime) -> None:
    sm = alice.sm
    saved = execute(sm, ts, 1, {"saveWeights": {}})
    arn = get(sm, ts, saved, runtime)["operationResult"]["saveWeights"]["modelPackageArn"]
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 2})
    sm.sample_training_session(trainingSessionName=ts, body=body, modelPackageArn=arn)
    op = Operation.objects.filter(kind=Operation.Kind.SAMPLE).latest("created_at")
    assert op.sampling_session.model_path.endswith("/sampler_weights/sampler-1")
    with pytest.raises(sm.exceptions.ResourceNotFoundException):
        sm.sample_training_session(trainingSessionName=ts, body=body, modelPackageArn=arn + "0")


def test_the_streamed_passthrough_is_openai_server_sent_events(alice, ts, runtime) -> None:
    body = {"prompt": [1, 2, 3], "max_tokens": 3, "seed": 2}
    out = alice.sm.sample_training_session_with_response_stream(
        trainingSessionName=ts, body=json.dumps(body)
    )
    assert out["contentType"].startswith("text/event-stream")
    events = [e for e in out["body"].read().decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks and all(c["object"] == "text_completion" for c in chunks)


def test_without_a_version_it_samples_the_latest_checkpoint(alice, ts, runtime) -> None:
    """Before any save, the base model (where the adapter starts); after, the newest weights
    the session saved; one sampler for each, reused."""
    from controlplane.training_sessions.models import SamplingSession

    sm = alice.sm
    config = {"prompt": prompt([1, 2]), "numSamples": 1, "samplingParams": SHORT}
    for _ in range(2):
        sample_op(sm, ts, {"sample": config}, runtime)
    (base,) = SamplingSession.objects.filter(session__name=ts)
    assert base.model_path == "" and base.live_model_id is None
    for seq in (1, 2):
        get(sm, ts, execute(sm, ts, seq, {"saveWeights": {}}), runtime)
    sample_op(sm, ts, {"sample": config}, runtime)
    sample_op(sm, ts, {"computeLogprobs": {"prompt": prompt([1, 2])}}, runtime)
    newest = SamplingSession.objects.filter(session__name=ts).exclude(pk=base.pk)
    assert [s.model_path.rsplit("/", 1)[1] for s in newest] == ["sampler-2"]
