"""SageMaker's runtime against a running Loopwright (PostgreSQL, Redis, gunicorn and a worker
process on the tiny model), driven by boto3's own ``sagemakertrainingsessionruntime`` client
with a key pair from ``manage.py create_access_key``, beside the same work through the Tinker
face (our SDK): from the same start (the Tinker model's state, loaded with ``loadState``) the
losses, logprobs and seeded samples are equal, and the usage the runtime reports, the client's
own count and both sessions' bills agree. Another account's key reaches nothing."""

from __future__ import annotations

import json

import boto3
import httpx
import pytest
from botocore.config import Config

from loopwright import ServiceClient
from loopwright.types import AdamParams, ModelInput, SamplingParams
from tests.support.data import next_token_datum

from .stack import TINY, Stack
from .test_sagemaker_e2e import key_pair, sagemaker, wait_status

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("sagemaker-runtime")).start()
    try:
        yield running
    finally:
        running.stop()


BATCHES = [[[1, 2, 3, 4, 5, 6], [7, 8, 9]], [[10, 11, 12, 13], [14, 15, 16, 17, 18]]]
PROMPT = [1, 2, 3]


def runtime(stack: Stack, pair: dict):
    return boto3.client(
        "sagemakertrainingsessionruntime",
        endpoint_url=f"{stack.url}/sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id=pair["access_key_id"],
        aws_secret_access_key=pair["secret_access_key"],
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )


def runtime_datum(tokens: list[int]) -> dict:
    return {
        "modelInput": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "lossFnInputs": {
            "target_tokens": {"data": [(t + 1) % 256 for t in tokens], "dtype": "int64"},
            "weights": {"data": [1.0] * len(tokens), "dtype": "float32"},
        },
    }


class Runtime:
    """One training session through the runtime: operations numbered as the SDK numbers them,
    each result awaited (the runtime's result call waits for it, like a long poll)."""

    def __init__(self, client, name: str) -> None:
        self.client, self.name, self.seq = client, name, 0

    def train(self, config: dict) -> dict:
        self.seq += 1
        op = self.client.execute_training_operation(
            trainingSessionName=self.name,
            sequenceNumber=self.seq,
            clientToken=f"op-{self.seq}",
            operationConfig=config,
        )["operationId"]
        return self._wait(self.client.get_training_operation_result, op)

    def sample(self, config: dict) -> dict:
        op = self.client.execute_sampling_operation(
            trainingSessionName=self.name, operationConfig=config
        )["operationId"]
        return self._wait(self.client.get_sampling_operation_result, op)

    def _wait(self, get, op: str) -> dict:
        for _ in range(30):
            out = get(trainingSessionName=self.name, operationId=op)
            if out["status"] not in ("Pending", "InProgress"):
                assert out["status"] == "Completed", out
                return out
        raise AssertionError(f"{op} did not finish")


def test_a_session_through_boto3_does_what_the_tinker_face_does(stack: Stack) -> None:
    pair = key_pair(stack)
    sm, rt = sagemaker(stack, pair), runtime(stack, pair)
    hub = sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")
    (tiny,) = [h for h in hub["HubContentSummaries"] if h["HubContentDisplayName"] == TINY]
    arn = sm.create_training_session(
        TrainingSessionName="e2e-runtime",
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=stack.roles["alice"],
        ModelConfig={"BaseModelArn": tiny["HubContentArn"]},
        OutputConfig={"S3Location": {"Path": "s3://my-bucket/e2e-runtime"}},
    )["TrainingSessionArn"]
    wait_status(sm, "e2e-runtime", "Running")

    # the Tinker face's model, and its first state: where both start
    http = httpx.Client(base_url=stack.url, headers={"X-API-Key": stack.keys["alice"]}, timeout=60)
    svc = ServiceClient(base_url=stack.url, api_key=stack.keys["alice"])
    tinker = svc.create_lora_training_client(
        TINY, rank=4, alpha=8, seed=5, role_arn=stack.roles["alice"]
    )
    start = tinker.save_state("start").result().path
    package = http.get("/api/v1/registry/model-packages/by-path", params={"path": start}).json()
    ours = Runtime(rt, "e2e-runtime")
    load = {"modelPackageArn": package["model_package_arn"], "loadOptimizer": True}
    assert ours.train({"loadState": load})["operationResult"] == {"loadState": {}}

    counted = {"train": 0, "prefill": 0, "sampled": 0}  # what this client sent and received
    adam = {"learningRate": 0.005, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weightDecay": 0.0}
    for batch in BATCHES:
        config = {"lossFnName": "cross_entropy", "datumList": [runtime_datum(t) for t in batch]}
        got = ours.train({"forwardBackward": config})
        ours.train({"optimizerStep": {"adamParamsConfig": adam}})
        want = tinker.forward_backward(
            [next_token_datum(t) for t in batch], "cross_entropy"
        ).result()
        tinker.optim_step(
            AdamParams(learning_rate=0.005, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0)
        ).result()
        result = got["operationResult"]["forwardBackward"]
        assert result["metrics"]["loss:sum"] == pytest.approx(want.metrics["loss:sum"], rel=1e-5)
        for a, b in zip(result["lossFnOutputs"], want.loss_fn_outputs, strict=True):
            assert a["logprobs"]["data"] == pytest.approx(b["logprobs"].tolist(), abs=1e-5)
        counted["train"] += sum(len(t) for t in batch)
        assert got["tokenUsage"]["trainingTokens"] == sum(len(t) for t in batch)

    saved = ours.train({"saveWeights": {"description": "after two steps"}})
    version = saved["operationResult"]["saveWeights"]["modelPackageArn"]
    loaded = ours.sample({"loadWeightsForSampling": {"modelPackageArn": version}})
    assert loaded["operationResult"] == {"loadWeightsForSampling": {}}
    params = {"maxTokens": 512, "seed": 11, "temperature": 1.0, "stop": ["\n"]}
    config = {"prompt": {"chunks": [{"type": "encoded_text", "tokens": PROMPT}]}}
    sample = {**config, "numSamples": 3, "samplingParams": params, "modelPackageArn": version}
    got = ours.sample({"sample": sample})["operationResult"]["sample"]["sequences"]
    sampler = tinker.save_weights_and_get_sampling_client("after-two-steps")
    want = sampler.sample(
        ModelInput.from_ints(PROMPT),
        num_samples=3,
        sampling_params=SamplingParams(max_tokens=512, seed=11, temperature=1.0, stop=["\n"]),
    ).result()
    assert [s["tokens"] for s in got] == [s.tokens for s in want.sequences]
    counted["prefill"] += sum(s["tokenUsage"]["prefill"] for s in got)
    counted["sampled"] += sum(len(s["tokens"]) for s in got)
    assert counted["prefill"] == len(PROMPT)  # the prompt, prefilled once for its samples

    logprobs = ours.sample({"computeLogprobs": {**config, "modelPackageArn": version}})
    scored = logprobs["operationResult"]["computeLogprobs"]["logprobs"]
    assert scored[1:] == pytest.approx(sampler.compute_logprobs(PROMPT).result()[1:], abs=1e-5)
    counted["prefill"] += len(PROMPT)  # scoring is a one-token sample of the prompt, billed so
    counted["sampled"] += 1

    # the bills: this session's, as the control plane reports it and as the Tinker face's
    # session bill says, equal to what the client counted; the Tinker session did the same work
    detail = sm.describe_training_session(TrainingSessionName="e2e-runtime")
    usage = detail["TrainingSessionDetail"]["BillableTokenUsage"]
    assert usage == {
        "PrefillTokenCount": counted["prefill"],
        "SampleTokenCount": counted["sampled"],
        "TrainingTokenCount": counted["train"],
    }
    session_id = arn.rsplit("/", 1)[1]
    ours_bill = _bill(http, session_id)
    assert ours_bill == _bill(http, tinker.session_id)
    assert ours_bill["train_tokens"] == counted["train"]


def _bill(http: httpx.Client, session_id: str) -> dict[str, int]:
    report = http.get(f"/api/v1/sessions/{session_id}/usage").json()
    bill: dict[str, int] = {}
    for line in report["lines"]:
        bill[line["meter"]] = bill.get(line["meter"], 0) + line["quantity"]
    return bill


def test_the_passthrough_streams_openai_events(stack: Stack) -> None:
    pair = key_pair(stack)
    sm, rt = sagemaker(stack, pair), runtime(stack, pair)
    hub = sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")
    sm.create_training_session(
        TrainingSessionName="e2e-stream",
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=stack.roles["alice"],
        ModelConfig={"BaseModelArn": hub["HubContentSummaries"][0]["HubContentArn"]},
        OutputConfig={"S3Location": {"Path": "s3://my-bucket/e2e-stream"}},
    )
    wait_status(sm, "e2e-stream", "Running")
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "seed": 3}
    answer = rt.sample_training_session(trainingSessionName="e2e-stream", body=json.dumps(chat))
    assert json.loads(answer["body"].read())["object"] == "chat.completion"
    out = rt.sample_training_session_with_response_stream(
        trainingSessionName="e2e-stream", body=json.dumps({**chat, "stream": True})
    )
    events = [line for line in out["body"].iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert len(chunks) >= 2 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert (
        text
        == json.loads(
            rt.sample_training_session(trainingSessionName="e2e-stream", body=json.dumps(chat))[
                "body"
            ].read()
        )["choices"][0]["message"]["content"]
    )


def test_another_accounts_key_reaches_nothing(stack: Stack) -> None:
    alice = runtime(stack, key_pair(stack))
    charlie = runtime(stack, key_pair(stack, "charlie"))
    for name in ("e2e-runtime", "no-such-session"):
        with pytest.raises(charlie.exceptions.ResourceNotFoundException):
            charlie.get_training_operation_result(trainingSessionName=name, operationId="req-1")
    with pytest.raises(alice.exceptions.ResourceNotFoundException):
        alice.get_training_operation_result(trainingSessionName="e2e-runtime", operationId="req-1")
