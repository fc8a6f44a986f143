"""Mutation fuzzing of every operation of the runtime, from botocore's model of its input
(``tests.aws.model_fuzz``): valid inputs (some naming alice's session and operations) with one
thing broken, laid out as the model says (URI members in the path, header members as headers,
the rest, or the payload, as the body), signed and sent through the whole Django stack. Never a
5xx, every refusal in AWS's shape, and the valid inputs reach the operation."""

from __future__ import annotations

import json
import os
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controlplane.sagemaker_sessions.shapes import operation_model, service_model
from tests.aws.model_fuzz import JUNK, mutated_input, valid_input
from tests.aws.signing import signed

from .boto import ENDPOINT, SERVICE, send
from .sessions import SHORT, prompt, tokens_datum

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("LOOPWRIGHT_FUZZ_EXAMPLES", "40"))
OPERATIONS = sorted(service_model(SERVICE).operation_names)
SIGNATURE_CODES = {
    "MissingAuthenticationTokenException",
    "IncompleteSignatureException",
    "InvalidSignatureException",
    "UnrecognizedClientException",
}


@pytest.fixture
def seeds(alice, ts, runtime) -> dict:
    """An input each operation answers, and strategies for the members that name things
    (alice's session, an operation of each kind, a saved version) or configure what can
    succeed."""
    sm = alice.sm
    saved = sm.execute_training_operation(
        trainingSessionName=ts, sequenceNumber=1, operationConfig={"saveWeights": {}}
    )["operationId"]
    runtime.drain()
    arn = sm.get_training_operation_result(trainingSessionName=ts, operationId=saved)[
        "operationResult"
    ]["saveWeights"]["modelPackageArn"]
    config = {"prompt": prompt([1, 2]), "numSamples": 1, "samplingParams": SHORT}
    sample = sm.execute_sampling_operation(
        trainingSessionName=ts, operationConfig={"sample": config}
    )["operationId"]
    runtime.drain()
    fb = {"lossFnName": "cross_entropy", "datumList": [tokens_datum([1, 2, 3])]}
    training = st.sampled_from(
        [
            {"saveState": {}},
            {"forwardBackward": fb},
            {"optimizerStep": {"adamParamsConfig": {"learningRate": 1e-4}}},
        ]
    )
    sampling = st.sampled_from(
        [{"sample": config}, {"computeLogprobs": {"prompt": prompt([3, 4])}}]
    )
    examples = {
        "ExecuteTrainingOperation": {
            "trainingSessionName": ts,
            "sequenceNumber": 2,
            "operationConfig": {"saveState": {}},
        },
        "GetTrainingOperationResult": {"trainingSessionName": ts, "operationId": saved},
        "ExecuteSamplingOperation": {
            "trainingSessionName": ts,
            "operationConfig": {"sample": config},
        },
        "GetSamplingOperationResult": {"trainingSessionName": ts, "operationId": sample},
        "SampleTrainingSession": {
            "trainingSessionName": ts,
            "body": {"prompt": [1], "max_tokens": 1},
        },
        "SampleTrainingSessionWithResponseStream": {
            "trainingSessionName": ts,
            "body": {"prompt": [1], "max_tokens": 1},
        },
    }
    return examples, {
        "trainingSessionName": st.just(ts),
        "operationId": {
            "GetTrainingOperationResult": st.just(saved),
            "GetSamplingOperationResult": st.just(sample),
        },
        "modelPackageArn": st.just(arn),
        "sequenceNumber": st.integers(min_value=2, max_value=40),
        "operationConfig": {
            "ExecuteTrainingOperation": training,
            "ExecuteSamplingOperation": sampling,
        },
        "maxTokens": st.just(512),
        "tokens": st.lists(st.integers(0, 255), min_size=1, max_size=4),
        "body": st.one_of(
            st.just({"prompt": [1, 2], "max_tokens": 2}),
            st.fixed_dictionaries({"messages": st.just([{"role": "user", "content": "hi"}])}).map(
                lambda b: {**b, "max_tokens": 2}
            ),
            JUNK,
        ),
    }


def request_of(operation: str, params: object) -> tuple[str, str, dict, bytes]:
    """The HTTP request botocore would make of ``params`` (whatever they hold)."""
    model = operation_model(SERVICE, operation)
    members = model.input_shape.members
    params = params if isinstance(params, dict) else {"": params}
    uri, headers, body = model.http["requestUri"], {}, {}
    payload = model.input_shape.serialization.get("payload")
    for name, value in params.items():
        member = members.get(name)
        where = member.serialization.get("location") if member is not None else None
        if where == "uri":
            uri = uri.replace("{" + member.serialization["name"] + "}", quote(str(value), safe=""))
        elif where == "header":
            text = "".join(c for c in str(value)[:200] if " " < c <= "~")  # what HTTP carries
            if text:
                headers[member.serialization["name"]] = text
        elif name != payload:
            body[name] = value
    uri = uri.replace("{trainingSessionName}", "").replace("{operationId}", "")
    raw = params.get(payload) if payload else body
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode() if raw is not None else b""
    return model.http["method"], ENDPOINT + uri, headers, data


def answer_is_aws(response) -> int:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        body = json.loads(response.content)
        assert set(body) == {"__type", "message"}, body
        assert response.headers["x-amzn-ErrorType"] == body["__type"]
        assert body["__type"] not in SIGNATURE_CODES, body  # only the input is broken
    return response.status_code


@pytest.mark.parametrize("operation", OPERATIONS)
def test_mutated_inputs_are_refused_cleanly(alice, seeds, operation: str) -> None:
    examples, seeds = seeds
    shape = operation_model(SERVICE, operation).input_shape
    # a seed given per operation: the one for this operation
    seeds = {
        name: seed.get(operation, st.nothing()) if isinstance(seed, dict) else seed
        for name, seed in seeds.items()
    }
    answered: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(st.one_of(mutated_input(shape, seeds=seeds), valid_input(shape, seeds=seeds)))
    @example(examples[operation])  # at least one that is answered
    def run(params) -> None:
        method, url, headers, data = request_of(operation, params)
        request = signed(
            alice.key_id,
            alice.secret,
            url=url,
            method=method,
            target=None,
            body=data,
            headers={"Content-Type": "application/json", **headers},
        )
        answered.append(answer_is_aws(send(request)))

    run()
    assert 200 in answered, (operation, sorted(set(answered)))
