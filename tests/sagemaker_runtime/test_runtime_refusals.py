"""Bad input to the runtime: the service model's limits and this service's own, each a
``ValidationException`` naming the member and the limit (sent by boto3 with its own checks off,
as a client that does not check would send it); nothing harms the session."""

from __future__ import annotations

import json

import pytest

from controlplane.training_sessions.models import Operation

from .boto import runtime_client
from .sessions import prompt, tokens_datum

pytestmark = pytest.mark.django_db


@pytest.fixture
def raw(alice):
    """alice's runtime client without botocore's own checks of the input."""
    return runtime_client(alice.key_id, alice.secret, validate=False)


def fb(datums=None, loss="cross_entropy", **extra) -> dict:
    datums = [tokens_datum([1, 2, 3])] if datums is None else datums
    return {"forwardBackward": {"lossFnName": loss, "datumList": datums, **extra}}


def rl_datum(**inputs) -> dict:
    datum = tokens_datum([1, 2, 3])
    datum["lossFnInputs"]["advantages"] = {"data": [1.0, 1.0, 1.0], "dtype": "float32"}
    datum["lossFnInputs"]["logprobs"] = {"data": [-1.0, -1.0, -1.0], "dtype": "float32"}
    datum["lossFnInputs"].update(inputs)
    return datum


def adam(**params) -> dict:
    return {"optimizerStep": {"adamParamsConfig": {"learningRate": 1e-4, **params}}}


def no_weights() -> dict:
    datum = tokens_datum([1, 2, 3])
    del datum["lossFnInputs"]["weights"]
    return datum


TRAINING = {
    "learning rate above the model's": (adam(learningRate=0.02), "learningRate"),
    "learning rate 0": (adam(learningRate=0), "learningRate: must be greater than 0"),
    "LoRA+": (adam(loraPlusLrRatio=8.0), "loraPlusLrRatio: LoRA+"),
    "eps below the model's": (adam(eps=1e-20), "eps"),
    "no datum": (fb([]), "datumList: must contain at least one datum"),
    "over our datums": (fb([tokens_datum([1])] * 1025), "at most 1024 datums"),
    "an empty model input": (
        fb([{"modelInput": {"chunks": []}, "lossFnInputs": tokens_datum([1])["lossFnInputs"]}]),
        "modelInput.chunks: must hold at least one chunk",
    ),
    "a missing required input": (fb([no_weights()]), "cross_entropy requires"),
    "an input this service has not": (
        fb([rl_datum(ref_log_prob={"data": [0.0] * 3, "dtype": "float32"})], loss="ppo"),
        "lossFnInputs.ref_log_prob",
    ),
    "an input the model has not": (
        fb([rl_datum(mask={"data": [0.0] * 3, "dtype": "float32"})], loss="ppo"),
        "lossFnInputs.mask: not a loss input",
    ),
    "a dtype the model has not": (
        fb([rl_datum(weights={"data": [1.0] * 3, "dtype": "complex64"})], loss="ppo"),
        "weights.dtype",
    ),
    "negative ppo weights": (
        fb([rl_datum(weights={"data": [1.0, -1.0, 1.0], "dtype": "float32"})], loss="ppo"),
        "ppo takes a mask of weights",
    ),
    "a mask of another length": (
        fb([rl_datum(weights={"data": [1.0], "dtype": "float32"})], loss="cispo"),
        "weights: has 1 values but advantages has 3",
    ),
    "a config key the model has not": (
        fb(loss="ppo", datums=[rl_datum()], lossFnConfig={"beta": 0.1}),
        "lossFnConfig.beta: not a key",
    ),
    "a clip above the model's": (
        fb(loss="ppo", datums=[rl_datum()], lossFnConfig={"clip_high_threshold": 11}),
        "clip_high_threshold: a number from 1 to 10",
    ),
    "a config for a loss that takes none": (
        fb(lossFnConfig={"clip_low_threshold": 0.5}),
        "cross_entropy takes no configuration",
    ),
    "two members of the union": ({**adam(), "saveState": {}}, "exactly one member"),
    "no member of the union": ({}, "exactly one member"),
    "a description over the model's": ({"saveWeights": {"description": "x" * 1025}}, "1024"),
}


@pytest.mark.parametrize("case", list(TRAINING))
def test_training_refusals_name_the_member(raw, ts, runtime, case) -> None:
    config, expected = TRAINING[case]
    with pytest.raises(raw.exceptions.ValidationException, match=expected) as caught:
        raw.execute_training_operation(
            trainingSessionName=ts, sequenceNumber=1, operationConfig=config
        )
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # the refused request took its sequence number: the next one runs
    ok = raw.execute_training_operation(
        trainingSessionName=ts, sequenceNumber=2, operationConfig={"saveState": {}}
    )
    runtime.drain()
    assert Operation.objects.get(id=ok["operationId"]).status == Operation.Status.DONE


def sample(**config) -> dict:
    base = {"prompt": prompt([1, 2, 3]), "numSamples": 1, "samplingParams": {"maxTokens": 512}}
    return {"sample": {**base, **config}}


SAMPLING = {
    "maxTokens under the model's": (sample(samplingParams={"maxTokens": 16}), "maxTokens"),
    "past the context": (
        sample(prompt=prompt([1] * 600), samplingParams={"maxTokens": 512}),
        "exceed the context",
    ),
    "over our samples": (sample(numSamples=129), "numSamples: at most 128"),
    "a temperature over the model's": (
        sample(samplingParams={"maxTokens": 512, "temperature": 2.5}),
        "temperature",
    ),
    "topP 0": (sample(samplingParams={"maxTokens": 512, "topP": 0}), "topP: must be above 0"),
    "too many prompt logprobs": (sample(topkPromptLogprobs=65), "topkPromptLogprobs"),
    "an empty prompt": (sample(prompt={"chunks": []}), "prompt: must hold at least one token"),
    "a logprobs prompt past the context": (
        {"computeLogprobs": {"prompt": prompt([1] * 1024)}},
        "exceed the context",
    ),
    "two members": ({**sample(), "computeLogprobs": {"prompt": prompt([1])}}, "exactly one"),
}


@pytest.mark.parametrize("case", list(SAMPLING))
def test_sampling_refusals_name_the_member(raw, ts, case) -> None:
    config, expected = SAMPLING[case]
    with pytest.raises(raw.exceptions.ValidationException, match=expected):
        raw.execute_sampling_operation(trainingSessionName=ts, operationConfig=config)


def test_names_and_tokens_outside_the_models_patterns(raw, ts) -> None:
    with pytest.raises(raw.exceptions.ValidationException, match="trainingSessionName"):
        raw.execute_sampling_operation(trainingSessionName="a_b", operationConfig=sample())
    with pytest.raises(raw.exceptions.ValidationException, match="clientToken"):
        raw.execute_training_operation(
            trainingSessionName=ts,
            sequenceNumber=1,
            clientToken="not_a_token",
            operationConfig={"saveState": {}},
        )
    with pytest.raises(raw.exceptions.ValidationException, match="sequenceNumber"):
        raw.execute_training_operation(
            trainingSessionName=ts, sequenceNumber=0, operationConfig={"saveState": {}}
        )


RAW = {
    b"{nope": "JSON parse error",
    b"[1]": "a JSON object",
    b'{"sequenceNumber": 1, "operationConfig": {"saveState": {"name": "x"}}}': "unknown member",
    b'{"sequenceNumber": 1e999, "operationConfig": {"saveState": {}}}': "finite",
}


@pytest.mark.parametrize("body", list(RAW))
def test_bodies_botocore_would_not_send(alice, ts, body) -> None:
    from tests.aws.signing import signed

    from .boto import send

    url = f"http://testserver/sagemaker-runtime/v1/training-sessions/{ts}/operations"
    request = signed(alice.key_id, alice.secret, url=url, target=None, body=body)
    response = send(request)
    assert response.status_code == 400, response.content
    answer = json.loads(response.content)
    assert answer["__type"] == "ValidationException" and RAW[body] in answer["message"]
    assert response.headers["x-amzn-ErrorType"] == "ValidationException"


def test_an_unsigned_or_wrongly_signed_call_is_refused_in_awss_words(alice, ts) -> None:
    bad = runtime_client(alice.key_id, alice.secret + "x")
    with pytest.raises(bad.exceptions.ClientError, match="InvalidSignatureException"):
        bad.get_training_operation_result(trainingSessionName=ts, operationId="req-1")
    other_service = runtime_client(alice.key_id, alice.secret, region="eu-west-1")
    with pytest.raises(other_service.exceptions.ClientError, match="InvalidSignatureException"):
        other_service.get_training_operation_result(trainingSessionName=ts, operationId="req-1")
