"""SageMaker's control plane against a running Loopwright (PostgreSQL, Redis, gunicorn and a
worker process on the tiny model), with boto3's own ``sagemaker`` client and a key pair from
``manage.py create_access_key``: a training session made with boto3 runs, is trained through
the Tinker API (our SDK) and its usage is the Tinker face's bill; a Tinker session is listed;
the registry calls sagemaker-train makes work; a revoked key, a wrong secret, another region,
a clock outside the window, a tampered body and an expired presigned URL are each refused."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import boto3
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from loopwright import ServiceClient
from loopwright.types import AdamParams
from tests.aws.signing import client_clock
from tests.support.data import next_token_datum

from .stack import TINY, Stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = Stack("postgres-redis", tmp_path_factory.mktemp("sagemaker")).start()
    try:
        yield running
    finally:
        running.stop()


def key_pair(stack: Stack, who: str = "alice") -> dict:
    return json.loads(
        stack.manage(
            "create_access_key",
            "--account",
            stack.accounts[who],
            "--role",
            "LoopwrightSessionRole",
            "--json",
        )
    )


def sagemaker(stack: Stack, pair: dict, region: str = "us-east-1"):
    return boto3.client(
        "sagemaker",
        endpoint_url=f"{stack.url}/sagemaker",
        region_name=region,
        aws_access_key_id=pair["access_key_id"],
        aws_secret_access_key=pair["secret_access_key"],
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )


def wait_status(sm, name: str, wanted: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        detail = sm.describe_training_session(TrainingSessionName=name)["TrainingSessionDetail"]
        if detail["TrainingSessionStatus"] == wanted or time.monotonic() > deadline:
            assert detail["TrainingSessionStatus"] == wanted, detail
            return detail
        time.sleep(0.3)


def code(caught) -> str:
    return caught.value.response["Error"]["Code"]


def test_a_boto3_session_trains_through_the_tinker_api(stack: Stack) -> None:
    sm = sagemaker(stack, key_pair(stack))
    hub = sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")
    (tiny,) = [h for h in hub["HubContentSummaries"] if h["HubContentDisplayName"] == TINY]
    group = sm.create_model_package_group(ModelPackageGroupName="e2e-runs")
    with pytest.raises(ClientError) as caught:
        sm.create_model_package_group(ModelPackageGroupName="e2e-runs")
    assert code(caught) == "ResourceInUse"
    described = sm.describe_model_package_group(ModelPackageGroupName="e2e-runs")
    assert described["ModelPackageGroupArn"] == group["ModelPackageGroupArn"]
    arn = sm.create_training_session(
        TrainingSessionName="e2e-boto3",
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=stack.roles["alice"],
        ModelConfig={"BaseModelArn": tiny["HubContentArn"]},
        OutputConfig={"S3Location": {"Path": "s3://my-bucket/e2e"}},
        ModelPackageGroupArn=group["ModelPackageGroupArn"],
    )["TrainingSessionArn"]
    wait_status(sm, "e2e-boto3", "Running")
    session_id = arn.rsplit("/", 1)[1]
    svc = ServiceClient(base_url=stack.url, api_key=stack.keys["alice"])
    info = svc.get_session(session_id)
    assert info.name == "e2e-boto3"
    (model_id,) = info.model_ids
    trainer = svc.create_training_client(model_id)
    data = [next_token_datum([1, 2, 3, 4]), next_token_datum([5, 6, 7])]
    out = trainer.forward_backward(data, "cross_entropy").result()
    assert "loss:sum" in out.metrics
    trainer.optim_step(AdamParams(learning_rate=1e-3)).result()
    trainer.save_state("after-one-step").result()
    detail = sm.describe_training_session(TrainingSessionName="e2e-boto3")["TrainingSessionDetail"]
    assert detail["BillableTokenUsage"]["TrainingTokenCount"] == 7  # the tokens sent
    assert detail["LastReceivedSequenceNumber"] == 3
    bill = httpx.get(
        f"{stack.url}/api/v1/sessions/{session_id}/usage",
        headers={"X-API-Key": stack.keys["alice"]},
    ).json()
    assert bill["total_quantity"] == sum(detail["BillableTokenUsage"].values())
    packages = sm.list_model_packages(
        ModelPackageGroupName="e2e-runs", SortBy="CreationTime", SortOrder="Descending"
    )["ModelPackageSummaryList"]
    assert len(packages) == 1
    package = sm.describe_model_package(ModelPackageName=packages[0]["ModelPackageArn"])
    assert package["InferenceSpecification"]["Containers"][0]["IsCheckpoint"] is True
    sm.update_model_package(
        ModelPackageArn=package["ModelPackageArn"], ModelApprovalStatus="Approved"
    )
    assert (
        sm.describe_model_package(ModelPackageName=package["ModelPackageArn"])[
            "ModelApprovalStatus"
        ]
        == "Approved"
    )
    sm.stop_training_session(TrainingSessionName="e2e-boto3")
    with pytest.raises(ClientError) as caught:
        sm.stop_training_session(TrainingSessionName=arn.rsplit("/", 1)[1])
    assert "invalid session state transition from Stopping to " in str(caught.value)
    wait_status(sm, "e2e-boto3", "Stopped")
    sm.delete_training_session(TrainingSessionName="e2e-boto3")
    sm.delete_model_package(ModelPackageName=package["ModelPackageArn"])
    # the session stays in the Tinker API (and the dashboard) after its SageMaker deletion
    assert svc.get_session(session_id).name == "e2e-boto3"


def test_a_tinker_session_is_seen_by_boto3(stack: Stack) -> None:
    sm = sagemaker(stack, key_pair(stack))
    svc = ServiceClient(
        base_url=stack.url, api_key=stack.keys["alice"], role_arn=stack.roles["alice"]
    )
    with svc:
        trainer = svc.create_lora_training_client(TINY, rank=4, seed=0)
        session_id = trainer.session_id
        listed = [
            s["TrainingSessionArn"].rsplit("/", 1)[1]
            for s in sm.list_training_sessions(MaxResults=100)["TrainingSessionSummaries"]
        ]
        assert session_id in listed
        detail = wait_status(sm, session_id, "Running")
        assert detail["LoraConfig"]["Rank"] == 4


def test_signatures_that_do_not_hold(stack: Stack) -> None:
    pair = key_pair(stack)
    sm = sagemaker(stack, pair)
    assert sm.list_training_sessions()["TrainingSessionSummaries"] is not None
    wrong = {**pair, "secret_access_key": pair["secret_access_key"][::-1]}
    with pytest.raises(ClientError) as caught:
        sagemaker(stack, wrong).list_training_sessions()
    assert code(caught) == "InvalidSignatureException"
    with pytest.raises(ClientError) as caught:
        sagemaker(stack, pair, region="eu-west-1").list_training_sessions()
    assert code(caught) == "InvalidSignatureException"
    with (
        client_clock(datetime.now(UTC) - timedelta(minutes=20)),
        pytest.raises(ClientError) as caught,
    ):
        sm.list_training_sessions()
    assert code(caught) == "InvalidSignatureException"
    # a body changed after signing
    request = AWSRequest(
        method="POST",
        url=f"{stack.url}/sagemaker",
        data=b'{"MaxResults": 1}',
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": "SageMaker.ListTrainingSessions",
        },
    )
    credentials = Credentials(pair["access_key_id"], pair["secret_access_key"])
    SigV4Auth(credentials, "sagemaker", "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    ok = httpx.post(request.url, content=request.body, headers=headers)
    assert ok.status_code == 200, ok.text
    tampered = httpx.post(request.url, content=b'{"MaxResults": 2}', headers=headers)
    assert tampered.status_code == 403
    assert tampered.json()["__type"] == "InvalidSignatureException"
    assert tampered.headers["x-amzn-ErrorType"] == "InvalidSignatureException"
    # a presigned URL (whose signed headers its user sends) works until it expires
    url = sm.generate_presigned_url("list_training_sessions", ExpiresIn=2)
    target = {
        "X-Amz-Target": "SageMaker.ListTrainingSessions",
        "Content-Type": "application/x-amz-json-1.1",
    }
    assert httpx.post(url, headers=target).status_code == 200
    time.sleep(3)
    expired = httpx.post(url, headers=target)
    assert expired.status_code == 403 and "expired" in expired.json()["message"]
    # revoked through the API: refused from the next request on
    owner = {"X-API-Key": stack.keys["alice"]}
    r = httpx.post(
        f"{stack.url}/api/v1/iam/access-keys/{pair['access_key_id']}/revoke", headers=owner
    )
    assert r.status_code == 200, r.text
    with pytest.raises(ClientError) as caught:
        sm.list_training_sessions()
    assert code(caught) == "UnrecognizedClientException"
    unsigned = httpx.post(f"{stack.url}/sagemaker", content=b"{}", headers=target)
    assert unsigned.json()["__type"] == "MissingAuthenticationTokenException"
    assert unsigned.status_code < 500
