"""charlie (another account) reaches nothing of alice's through the runtime: every operation,
given alice's session, operation, sampler or model package, answers exactly what it answers for
one that does not exist (``ResourceNotFoundException``, the same message with the name in it),
never data. Every route of the face is probed (``PROBES``), so a new one cannot ship without."""

from __future__ import annotations

import json

import pytest

from controlplane.sagemaker_runtime.urls import urlpatterns

from .sessions import SHORT, prompt, tokens_datum, training_session

pytestmark = pytest.mark.django_db

MISSING_ARN = "arn:loopwright:registry::000000000000:model-package/nobody/1"


@pytest.fixture
def alices(alice, ts, runtime) -> dict:
    """alice's things: a training operation, a sample operation, a sampler, a saved version."""
    sm = alice.sm
    saved = sm.execute_training_operation(
        trainingSessionName=ts, sequenceNumber=1, operationConfig={"saveWeights": {}}
    )["operationId"]
    runtime.drain()
    out = sm.get_training_operation_result(trainingSessionName=ts, operationId=saved)
    arn = out["operationResult"]["saveWeights"]["modelPackageArn"]
    sampler = sm.execute_sampling_operation(
        trainingSessionName=ts, operationConfig={"loadWeightsForSampling": {"modelPackageArn": arn}}
    )["operationId"]
    config = {"prompt": prompt([1]), "numSamples": 1, "samplingParams": SHORT}
    sample = sm.execute_sampling_operation(
        trainingSessionName=ts, operationConfig={"sample": config}
    )["operationId"]
    return {"ts": ts, "op": saved, "arn": arn, "sampler": sampler, "sample": sample}


def refusal(call, **kwargs) -> tuple[int, str, str]:
    try:
        out = call(**kwargs)
    except Exception as exc:  # botocore's ClientError
        error = exc.response["Error"]
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], error["Code"], error["Message"]
    raise AssertionError(f"answered {json.dumps(out, default=str)[:300]}")


def same_as_missing(call, theirs: dict, missing: dict) -> None:
    """charlie's call with alice's names answers what it answers with names nobody has."""
    got = refusal(call, **theirs)
    want = refusal(call, **missing)
    assert got[:2] == want[:2] == (404, "ResourceNotFoundException"), (got, want)
    message = got[2]
    for key, value in theirs.items():
        if isinstance(value, str) and value != missing.get(key):
            message = message.replace(value, str(missing[key]))
    assert message == want[2]


def _train(sm, arn=None):
    def call(trainingSessionName, modelPackageArn=MISSING_ARN, config=None):
        config = config or {
            "loadState": {"modelPackageArn": modelPackageArn, "loadOptimizer": True}
        }
        return sm.execute_training_operation(
            trainingSessionName=trainingSessionName, sequenceNumber=1, operationConfig=config
        )

    return call


PROBES = {
    "v1/training-sessions/<str:name>/operations": "test_training_operations",
    "v1/training-sessions/<str:name>/operations/<str:operation_id>": "test_training_results",
    "v1/training-sessions/<str:name>/sampling-operations": "test_sampling_operations",
    "v1/training-sessions/<str:name>/sampling-operations/<str:operation_id>": (
        "test_sampling_results"
    ),
    "training-sessions/<str:name>/sample": "test_passthrough",
    "training-sessions/<str:name>/sample-with-response-stream": "test_passthrough",
    "^.*$": "no resource: every other path is UnknownOperationException",
}


def test_every_route_is_probed() -> None:
    assert {str(p.pattern) for p in urlpatterns} == set(PROBES)


@pytest.fixture
def charlies(charlie, runtime) -> str:
    return training_session(charlie.api, runtime, "ts-charlie")


def test_training_operations(charlie, alices, charlies) -> None:
    call = _train(charlie.sm)
    fb = {"forwardBackward": {"lossFnName": "cross_entropy", "datumList": [tokens_datum([1])]}}
    same_as_missing(
        call,
        {"trainingSessionName": alices["ts"], "config": fb},
        {"trainingSessionName": "ts-nobody", "config": fb},
    )
    # alice's model package, loaded into charlie's own session
    same_as_missing(
        call,
        {"trainingSessionName": charlies, "modelPackageArn": alices["arn"]},
        {"trainingSessionName": charlies, "modelPackageArn": MISSING_ARN},
    )


def test_training_results(charlie, alices, charlies) -> None:
    call = charlie.sm.get_training_operation_result
    same_as_missing(
        call,
        {"trainingSessionName": alices["ts"], "operationId": alices["op"]},
        {"trainingSessionName": "ts-nobody", "operationId": alices["op"]},
    )
    same_as_missing(
        call,
        {"trainingSessionName": charlies, "operationId": alices["op"]},
        {"trainingSessionName": charlies, "operationId": "req-000000000000000000000000"},
    )


def test_sampling_operations(charlie, alices, charlies) -> None:
    def call(trainingSessionName, arn):
        config = {"loadWeightsForSampling": {"modelPackageArn": arn}}
        return charlie.sm.execute_sampling_operation(
            trainingSessionName=trainingSessionName, operationConfig=config
        )

    same_as_missing(
        call,
        {"trainingSessionName": alices["ts"], "arn": MISSING_ARN},
        {"trainingSessionName": "ts-nobody", "arn": MISSING_ARN},
    )
    same_as_missing(
        call,
        {"trainingSessionName": charlies, "arn": alices["arn"]},
        {"trainingSessionName": charlies, "arn": MISSING_ARN},
    )


def test_sampling_results(charlie, alices, charlies) -> None:
    call = charlie.sm.get_sampling_operation_result
    for theirs in (alices["sample"], alices["sampler"]):
        same_as_missing(
            call,
            {"trainingSessionName": charlies, "operationId": theirs},
            {"trainingSessionName": charlies, "operationId": "req-000000000000000000000000"},
        )
        same_as_missing(
            call,
            {"trainingSessionName": alices["ts"], "operationId": theirs},
            {"trainingSessionName": "ts-nobody", "operationId": theirs},
        )


def test_passthrough(charlie, alices, charlies) -> None:
    body = json.dumps({"prompt": [1, 2], "max_tokens": 2})
    for call in (
        charlie.sm.sample_training_session,
        charlie.sm.sample_training_session_with_response_stream,
    ):
        same_as_missing(
            call,
            {"trainingSessionName": alices["ts"], "body": body},
            {"trainingSessionName": "ts-nobody", "body": body},
        )
        same_as_missing(
            call,
            {"trainingSessionName": charlies, "body": body, "modelPackageArn": alices["arn"]},
            {"trainingSessionName": charlies, "body": body, "modelPackageArn": MISSING_ARN},
        )
