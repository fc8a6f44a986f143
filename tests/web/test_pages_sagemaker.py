"""A training session made with boto3's ``sagemaker`` client is on the dashboard like any other:
in the sessions list and on its own page, with its model; charlie does not see it."""

from __future__ import annotations

import pytest

from controlplane.access_keys.services import access_key_create
from tests.aws.inprocess import sagemaker
from tests.support.pages import BASE_MODEL

pytestmark = pytest.mark.django_db


def test_a_boto3_session_is_on_the_dashboard(alice, charlie, worker) -> None:
    key, secret = access_key_create(tenant=alice.tenant, actor="test", name="t", user=alice.user)
    sm = sagemaker(key.access_key_id, secret)
    arn = sm.create_training_session(
        TrainingSessionName="from-boto3",
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=alice.role_arn,
        ModelConfig={"BaseModelArn": BASE_MODEL},
        OutputConfig={"S3Location": {"Path": "s3://my-bucket/out"}},
    )["TrainingSessionArn"]
    session_id = arn.rsplit("/", 1)[1]
    listing = alice.get("/sessions").content.decode()
    assert "from-boto3" in listing and session_id in listing
    page = alice.get(f"/sessions/{session_id}")
    assert page.status_code == 200 and "from-boto3" in page.content.decode()
    assert "from-boto3" not in charlie.get("/sessions").content.decode()
    assert charlie.get(f"/sessions/{session_id}").status_code == 404
