"""Mutation fuzzing of every operation of SageMaker's control plane, from botocore's model of
its input: valid inputs (some naming things that exist) with one thing broken, and bodies that
are not JSON at all, signed and sent through the whole stack. Whatever arrives, the answer is
never a 5xx, and every refusal is AWS's JSON error shape."""

from __future__ import annotations

import json
import os

import pytest
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controlplane.sagemaker.endpoint import OPERATIONS
from controlplane.sagemaker_sessions.shapes import operation_model
from tests.aws.model_fuzz import mutated_input, valid_input
from tests.aws.signing import send
from tests.controlplane.sagemaker.test_sagemaker_sessions import client_of, create, hub_arn_of
from tests.support.callers import Person
from tests.support.wire import result

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("LOOPWRIGHT_FUZZ_EXAMPLES", "40"))


@pytest.fixture
def keyed(alice: Person, runtime):
    sm = client_of(alice)
    group = sm.create_model_package_group(ModelPackageGroupName="fuzzed")["ModelPackageGroupArn"]
    arn = create(sm, alice, "fuzzed", ModelPackageGroupArn=group)
    create(sm, alice, "fuzzed-done")
    runtime.drain()
    sm.stop_training_session(TrainingSessionName="fuzzed-done")
    runtime.drain()
    (model_id,) = alice.get(f"sessions/{arn.rsplit('/', 1)[1]}").json()["model_ids"]
    saved = alice.post("save_weights", {"model_id": model_id, "seq_id": 1, "path": "s1"})
    result(alice, runtime, saved.json())  # version 1 of the group
    credentials = sm._request_signer._credentials
    seeds = {
        "TrainingSessionName": st.one_of(
            st.sampled_from(["fuzzed", "fuzzed-done"]),
            st.from_regex(r"new-[a-z0-9]{1,12}", fullmatch=True),
        ),
        "Rank": st.integers(min_value=1, max_value=128),
        "VpcConfig": st.none(),
        "KmsKeyArn": st.none(),
        "ModelPackageGroupName": st.sampled_from(["fuzzed", group]),
        "ModelPackageGroupArn": st.just(group),
        "ModelPackageName": st.just("fuzzed/1"),
        "ModelPackageArn": st.just(group.replace("-group/", "/") + "/1"),
        "RoleArn": st.just(alice.role_arn),
        "HubName": st.just("SageMakerPublicHub"),
        "HubContentName": st.just("loopwright-tiny-byte-llama"),
        "BaseModelArn": st.just(hub_arn_of(sm)),
        "Path": st.just("s3://my-bucket/out"),
    }
    package = group.replace("-group/", "/") + "/1"
    hub = {"HubName": "SageMakerPublicHub", "HubContentType": "Model"}
    # one input of each operation that succeeds, tried first: the random draws may hold no
    # success of an operation (a delete succeeds once, on one name)
    good = {
        "CreateTrainingSession": {
            "TrainingSessionName": "new-explicit",
            "LoraConfig": {"Rank": 4, "Alpha": 8},
            "RoleArn": alice.role_arn,
            "ModelConfig": {"BaseModelArn": hub_arn_of(sm)},
            "OutputConfig": {"S3Location": {"Path": "s3://my-bucket/out"}},
        },
        "DescribeTrainingSession": {"TrainingSessionName": "fuzzed"},
        "ListTrainingSessions": {},
        "StopTrainingSession": {"TrainingSessionName": "fuzzed"},
        "DeleteTrainingSession": {"TrainingSessionName": "fuzzed-done"},
        "CreateModelPackageGroup": {"ModelPackageGroupName": "explicit"},
        "DescribeModelPackageGroup": {"ModelPackageGroupName": "fuzzed"},
        "ListModelPackages": {"ModelPackageGroupName": "fuzzed"},
        "DescribeModelPackage": {"ModelPackageName": package},
        "UpdateModelPackage": {"ModelPackageArn": package, "ModelApprovalStatus": "Approved"},
        "DeleteModelPackage": {"ModelPackageName": package},
        "ListHubContents": hub,
        "DescribeHubContent": hub | {"HubContentName": "loopwright-tiny-byte-llama"},
    }
    return credentials.access_key, credentials.secret_key, seeds, good


SIGNATURE_CODES = {
    "MissingAuthenticationTokenException",
    "IncompleteSignature",
    "InvalidSignatureException",
    "UnrecognizedClientException",
}


def _answer_is_aws(response) -> int:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        body = json.loads(response.content)
        assert set(body) == {"__type", "message"}, body
        assert response["x-amzn-ErrorType"] == body["__type"]
        # only the input is broken: every request gets past its (valid) signature
        assert body["__type"] not in SIGNATURE_CODES, body
    return response.status_code


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_mutated_inputs_are_refused_cleanly(keyed, operation: str) -> None:
    key_id, secret, seeds, good = keyed
    shape = operation_model("sagemaker", operation).input_shape
    client = Client()
    answered: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(st.one_of(mutated_input(shape, seeds=seeds), valid_input(shape, seeds=seeds)))
    def run(params) -> None:
        body = json.dumps(params).encode()
        answered.append(
            _answer_is_aws(send(client, key_id, secret, f"SageMaker.{operation}", body))
        )

    example(good[operation])(run)()
    # the valid inputs among them reach the operation, and the explicit one succeeds
    assert answered[0] == 200, (operation, sorted(set(answered)))


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b"\xff\xfe",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 5000 + b"1" + b"}" * 5000,
        json.dumps({"TrainingSessionName": "x" * 100_000}).encode(),
    ],
)
def test_bodies_that_are_not_an_input(keyed, body: bytes) -> None:
    key_id, secret, *_ = keyed
    client = Client()
    for operation in ("DescribeTrainingSession", "CreateTrainingSession", "ListTrainingSessions"):
        _answer_is_aws(send(client, key_id, secret, f"SageMaker.{operation}", body))


def test_an_unknown_operation(keyed) -> None:
    key_id, secret, *_ = keyed
    response = send(Client(), key_id, secret, "SageMaker.CreateTrainingJob", b"{}")
    _answer_is_aws(response)
    assert json.loads(response.content)["__type"] == "UnknownOperationException"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/sagemaker/", 404, "UnknownOperationException"),
        ("/sagemaker/CreateTrainingSession", 404, "UnknownOperationException"),
        ("/sagemaker-runtime/no/such/route", 404, "UnknownOperationException"),
    ],
)
def test_paths_no_operation_answers_are_aws_errors(path: str, status: int, code: str) -> None:
    response = Client().post(path, b"{}", content_type="application/x-amz-json-1.1")
    assert response.status_code == status
    assert json.loads(response.content)["__type"] == code == response["x-amzn-ErrorType"]


def test_refusals_before_any_view_are_aws_errors(settings) -> None:
    settings.MAX_REQUEST_BYTES = 1000
    response = Client().post(
        "/sagemaker", b"{" + b" " * 2000 + b"}", content_type="application/x-amz-json-1.1"
    )
    assert response.status_code == 413
    assert json.loads(response.content)["__type"] == "ValidationException"
    response = Client().post(
        "/sagemaker", b"{}", content_type="application/x-amz-json-1.1", HTTP_X_AMZ_TARGET="a\x00b"
    )
    assert response.status_code == 400
    assert json.loads(response.content)["__type"] == "ValidationException"
