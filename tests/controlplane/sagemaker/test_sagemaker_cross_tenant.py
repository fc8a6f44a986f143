"""charlie (another account) probes every operation of SageMaker's control plane with alice's
names and ARNs: he never gets her data, and always the same error as for a name that does not
exist. Every operation of the face has its probe here."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from controlplane.sagemaker.endpoint import OPERATIONS
from tests.controlplane.sagemaker.test_sagemaker_sessions import client_of, create, hub_arn_of
from tests.support.callers import Person
from tests.support.wire import result

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(alice: Person, runtime) -> dict:
    sm = client_of(alice)
    group_arn = sm.create_model_package_group(ModelPackageGroupName="alice-models")[
        "ModelPackageGroupArn"
    ]
    session_arn = create(sm, alice, "alice-secret", ModelPackageGroupArn=group_arn)
    runtime.drain()
    session_id = session_arn.rsplit("/", 1)[1]
    (model_id,) = alice.get(f"sessions/{session_id}").json()["model_ids"]
    r = alice.post("save_weights", {"model_id": model_id, "seq_id": 1, "path": "s1"})
    result(alice, runtime, r.json())
    kms_arn = alice.post("kms/keys", {"description": "alice's"}).json()["arn"]
    return {
        "sm": sm,
        "session_arn": session_arn,
        "session_id": session_id,
        "group_arn": group_arn,
        "package_arn": f"{group_arn.replace('model-package-group', 'model-package')}/1",
        "kms_arn": kms_arn,
        "role_arn": alice.role_arn,
        "account": alice.tenant.account_id,
    }


def _create(w: dict, charlie: Person, **changes) -> dict:
    params = {
        "TrainingSessionName": "charlies",
        "LoraConfig": {"Rank": 4, "Alpha": 8},
        "RoleArn": charlie.role_arn,
        "ModelConfig": {"BaseModelArn": hub_arn_of(w["sm"])},
        "OutputConfig": {"S3Location": {"Path": "s3://my-bucket/o"}},
    }
    for path, value in changes.items():
        where = params
        *parents, last = path.split(".")
        for name in parents:
            where = where[name]
        where[last] = value
    return params


def probes(w: dict, charlie: Person) -> dict[str, list[tuple[dict, dict]]]:
    """operation → (params naming alice's thing, the same naming nothing that exists)."""
    other = "arn:loopwright:registry::{}:model-package-group/nope"
    mine = charlie.tenant.account_id
    return {
        "DescribeTrainingSession": [
            ({"TrainingSessionName": "alice-secret"}, {"TrainingSessionName": "nope"}),
            (
                {"TrainingSessionName": w["session_id"]},
                {"TrainingSessionName": "sess-" + "0" * 24},
            ),
        ],
        "StopTrainingSession": [
            ({"TrainingSessionName": "alice-secret"}, {"TrainingSessionName": "nope"}),
            ({"TrainingSessionName": w["session_id"]}, {"TrainingSessionName": "sess-" + "0" * 24}),
        ],
        "DeleteTrainingSession": [
            ({"TrainingSessionName": "alice-secret"}, {"TrainingSessionName": "nope"})
        ],
        "CreateTrainingSession": [
            (
                _create(w, charlie, RoleArn=w["role_arn"]),
                _create(w, charlie, RoleArn=f"arn:loopwright:iam::{mine}:role/Nope"),
            ),
            (
                _create(w, charlie, ModelPackageGroupArn=w["group_arn"]),
                _create(w, charlie, ModelPackageGroupArn=other.format("999999999999")),
            ),
            (
                _create(w, charlie, **{"OutputConfig.S3Location": {"Path": "s3://my-bucket/o", "KmsKeyArn": w["kms_arn"]}}),
                _create(w, charlie, **{"OutputConfig.S3Location": {"Path": "s3://my-bucket/o", "KmsKeyArn": f"arn:loopwright:kms::{mine}:key/00000000-0000-0000-0000-000000000000"}}),
            ),
        ],
        "DescribeModelPackageGroup": [
            ({"ModelPackageGroupName": w["group_arn"]}, {"ModelPackageGroupName": other.format(mine)}),
            ({"ModelPackageGroupName": "alice-models"}, {"ModelPackageGroupName": "nope"}),
        ],
        "ListModelPackages": [
            ({"ModelPackageGroupName": w["group_arn"]}, {"ModelPackageGroupName": other.format(mine)}),
            ({"ModelPackageGroupName": "alice-models"}, {"ModelPackageGroupName": "nope"}),
        ],
        "DescribeModelPackage": [
            ({"ModelPackageName": w["package_arn"]}, {"ModelPackageName": "nope/1"}),
            ({"ModelPackageName": "alice-models/1"}, {"ModelPackageName": "nope/1"}),
        ],
        "UpdateModelPackage": [
            (
                {"ModelPackageArn": w["package_arn"], "ModelApprovalStatus": "Approved"},
                {"ModelPackageArn": "nope/1", "ModelApprovalStatus": "Approved"},
            )
        ],
        "DeleteModelPackage": [
            ({"ModelPackageName": w["package_arn"]}, {"ModelPackageName": "nope/1"})
        ],
    }  # fmt: skip


# operations that name nothing of an account, or make something in the caller's own
NOT_ACCOUNT_SCOPED = {
    "ListTrainingSessions": "lists the caller's own: checked for leaks below",
    "CreateModelPackageGroup": "names are per account: charlie makes his own below",
    "ListHubContents": "the service-wide catalogue of base models",
    "DescribeHubContent": "the service-wide catalogue of base models",
}


def _error(call) -> tuple[str, int]:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


def test_every_operation_is_probed(world, charlie: Person) -> None:
    covered = set(probes(world, charlie)) | set(NOT_ACCOUNT_SCOPED)
    assert set(OPERATIONS) <= covered, f"probe {sorted(set(OPERATIONS) - covered)}"


def test_charlie_gets_the_answer_for_nothing(world, alice: Person, charlie: Person) -> None:
    theirs = client_of(charlie)
    for operation, pairs in probes(world, charlie).items():
        method = getattr(theirs, _snake(operation))
        for aliceish, missing in pairs:
            got = _error(lambda: method(**aliceish))  # noqa: B023
            expected = _error(lambda: method(**missing))  # noqa: B023
            assert got == expected, (operation, aliceish, got, expected)
            assert got[0] in ("ResourceNotFound", "ValidationException"), (operation, got)
    # what the probes change is all that fails: charlie's own request goes through
    assert theirs.create_training_session(**_create(world, charlie))["TrainingSessionArn"]
    # alice's things are untouched
    sm = world["sm"]
    detail = sm.describe_training_session(TrainingSessionName="alice-secret")
    assert detail["TrainingSessionDetail"]["TrainingSessionStatus"] == "Running"
    package = sm.describe_model_package(ModelPackageName=world["package_arn"])
    assert package["ModelApprovalStatus"] == "PendingManualApproval"


def test_charlies_lists_and_names_show_nothing_of_alices(world, charlie: Person) -> None:
    theirs = client_of(charlie)
    answers = [
        theirs.list_training_sessions(),
        theirs.list_training_sessions(NameContains="alice"),
        theirs.list_model_packages(),
        theirs.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model"),
    ]
    text = json.dumps(answers, default=str)
    for value in (world["session_id"], "alice-secret", "alice-models", world["account"]):
        assert value not in text
    assert answers[0]["TrainingSessionSummaries"] == []
    # a name alice uses is free in charlie's account
    made = theirs.create_model_package_group(ModelPackageGroupName="alice-models")
    assert charlie.tenant.account_id in made["ModelPackageGroupArn"]


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
