"""The model package registry and the Public Hub through boto3's ``sagemaker`` client, as
sagemaker-train uses them: a group made (and made again: ResourceInUse, then described), the
versions a session's saves register listed newest first and described with their base model
and kind, approved, deleted (twice: the second says it does not exist); the Hub lists the
served base models with the training-session capability."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.controlplane.sagemaker.test_sagemaker_sessions import client_of, code, create
from tests.support.callers import Person
from tests.support.tiny_worker import TINY
from tests.support.wire import result

pytestmark = pytest.mark.django_db


def save(person: Person, runtime, model_id: str, seq: int, endpoint: str, path: str) -> dict:
    r = person.post(endpoint, {"model_id": model_id, "seq_id": seq, "path": path})
    assert r.status_code == 200, r.content
    return result(person, runtime, r.json())


def test_a_group_and_its_versions(alice: Person, runtime) -> None:
    sm = client_of(alice)
    made = sm.create_model_package_group(
        ModelPackageGroupName="my-rl", ModelPackageGroupDescription="GRPO runs"
    )
    group_arn = made["ModelPackageGroupArn"]
    assert (
        group_arn == f"arn:loopwright:registry::{alice.tenant.account_id}:model-package-group/my-rl"
    )
    with pytest.raises(ClientError) as caught:
        sm.create_model_package_group(ModelPackageGroupName="my-rl")
    assert code(caught) == "ResourceInUse"
    for ref in ("my-rl", group_arn):
        group = sm.describe_model_package_group(ModelPackageGroupName=ref)
        assert group["ModelPackageGroupArn"] == group_arn
        assert group["ModelPackageGroupStatus"] == "Completed"
        assert group["ModelPackageGroupDescription"] == "GRPO runs"
    arn = create(sm, alice, "with-group", ModelPackageGroupArn=group_arn)
    runtime.drain()
    session_id = arn.rsplit("/", 1)[1]
    (model_id,) = alice.get(f"sessions/{session_id}").json()["model_ids"]
    save(alice, runtime, model_id, 1, "save_weights", "state-1")
    save(alice, runtime, model_id, 2, "save_weights_for_sampler", "sampler-2")
    listed = sm.list_model_packages(
        ModelPackageGroupName=group_arn, SortBy="CreationTime", SortOrder="Descending"
    )["ModelPackageSummaryList"]
    assert [p["ModelPackageVersion"] for p in listed] == [2, 1]
    assert all(p["ModelApprovalStatus"] == "PendingManualApproval" for p in listed)
    newest, oldest = (p["ModelPackageArn"] for p in listed)
    state = sm.describe_model_package(ModelPackageName=oldest)
    (container,) = state["InferenceSpecification"]["Containers"]
    assert container["IsCheckpoint"] is True
    assert container["BaseModel"] == {
        "HubContentName": "loopwright-tiny-byte-llama",
        "HubContentVersion": "1.0.0",
    }
    assert state["ManagedStorageType"] == "Restricted"  # kept by the service, not in S3 here
    assert state["CustomerMetadataProperties"]["loopwright:TinkerPath"].startswith("tinker://")
    sampler = sm.describe_model_package(ModelPackageName="my-rl/2")
    assert sampler["InferenceSpecification"]["Containers"][0]["IsCheckpoint"] is False
    assert sampler["ModelPackageArn"] == newest
    sm.update_model_package(
        ModelPackageArn=newest, ModelApprovalStatus="Approved", ApprovalDescription="eval ok"
    )
    approved = sm.describe_model_package(ModelPackageName=newest)
    assert approved["ModelApprovalStatus"] == "Approved"
    assert approved["ApprovalDescription"] == "eval ok"
    assert approved["LastModifiedBy"]["IamIdentity"]["Arn"].endswith(":user/alice@example.com")
    only = sm.list_model_packages(ModelPackageGroupName="my-rl", ModelApprovalStatus="Approved")
    assert [p["ModelPackageVersion"] for p in only["ModelPackageSummaryList"]] == [2]
    # the registry's own API sees the same approval
    version = alice.get("registry/model-package-groups/my-rl/versions/2").json()
    assert version["approval_status"] == "Approved"
    sm.delete_model_package(ModelPackageName=newest)
    with pytest.raises(ClientError) as caught:
        sm.delete_model_package(ModelPackageName=newest)
    assert code(caught) == "ValidationException" and "does not exist" in str(caught.value)
    with pytest.raises(ClientError) as caught:
        sm.update_model_package(ModelPackageArn=oldest, ModelCard={"ModelCardStatus": "Draft"})
    assert code(caught) == "ValidationException" and "ModelCard" in str(caught.value)


def test_list_model_packages_pages(alice: Person, runtime) -> None:
    sm = client_of(alice)
    group_arn = sm.create_model_package_group(ModelPackageGroupName="paged")["ModelPackageGroupArn"]
    arn = create(sm, alice, "saves", ModelPackageGroupArn=group_arn)
    runtime.drain()
    (model_id,) = alice.get(f"sessions/{arn.rsplit('/', 1)[1]}").json()["model_ids"]
    for seq in range(1, 6):
        save(alice, runtime, model_id, seq, "save_weights_for_sampler", f"s{seq}")
    seen, token = [], None
    while True:
        page = sm.list_model_packages(
            ModelPackageGroupName="paged", MaxResults=2, **({"NextToken": token} if token else {})
        )
        seen += [p["ModelPackageVersion"] for p in page["ModelPackageSummaryList"]]
        token = page.get("NextToken")
        if not token:
            break
    assert seen == [1, 2, 3, 4, 5]


def test_the_public_hub_lists_the_served_base_models(alice: Person, runtime) -> None:
    sm = client_of(alice)
    found = sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")
    (tiny,) = found["HubContentSummaries"]
    assert tiny["HubContentName"] == "loopwright-tiny-byte-llama"
    assert "@capability:training_session" in tiny["HubContentSearchKeywords"]
    assert tiny["HubContentArn"].startswith("arn:loopwright:sagemaker:us-east-1:aws:hub-content/")
    described = sm.describe_hub_content(
        HubName="SageMakerPublicHub", HubContentType="Model", HubContentName=tiny["HubContentName"]
    )
    assert json.loads(described["HubContentDocument"])["HuggingfaceId"] == TINY
    assert described["HubContentArn"] == tiny["HubContentArn"]
    empty = sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Notebook")
    assert empty["HubContentSummaries"] == []
    with pytest.raises(ClientError) as caught:
        sm.list_hub_contents(HubName="SomeOtherHub", HubContentType="Model")
    assert code(caught) == "ResourceNotFound"
    with pytest.raises(ClientError) as caught:
        sm.describe_hub_content(
            HubName="SageMakerPublicHub", HubContentType="Model", HubContentName="gpt-oss-20b"
        )
    assert code(caught) == "ResourceNotFound"
