"""SageMaker's control plane through boto3's own ``sagemaker`` client (answers parsed by
botocore's model): a training session made there trains in the same session the Tinker API
sees, and one made through the Tinker API is there; statuses, usage, the last sequence number,
stop, delete and listing as the service model says."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from controlplane.access_keys.services import access_key_create
from controlplane.iam.selectors import role_by_arn
from tests.aws.inprocess import sagemaker
from tests.support.callers import Person
from tests.support.tiny_worker import TINY
from tests.support.wire import ModelRun, datum, open_session

pytestmark = pytest.mark.django_db


def client_of(person: Person, *, role: bool = False):
    owner = (
        {"role": role_by_arn(tenant=person.tenant, arn=person.role_arn)}
        if role
        else {"user": person.tenant.memberships.get(user__email=f"{person.name}@example.com").user}
    )
    key, secret = access_key_create(tenant=person.tenant, actor="test", name="t", **owner)
    return sagemaker(key.access_key_id, secret)


def hub_arn_of(client) -> str:
    found = client.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")
    (tiny,) = [c for c in found["HubContentSummaries"] if c["HubContentDisplayName"] == TINY]
    return tiny["HubContentArn"]


def create(client, person: Person, name: str, **extra) -> str:
    answer = client.create_training_session(
        TrainingSessionName=name,
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=person.role_arn,
        ModelConfig={"BaseModelArn": hub_arn_of(client)},
        OutputConfig={"S3Location": {"Path": "s3://my-bucket/out"}},
        **extra,
    )
    return answer["TrainingSessionArn"]


def code(caught: pytest.ExceptionInfo) -> str:
    return caught.value.response["Error"]["Code"]


def test_a_session_made_with_boto3_runs_and_the_tinker_api_sees_it(alice: Person, runtime) -> None:
    sm = client_of(alice)
    arn = create(sm, alice, "exp-1", Tags=[{"Key": "team", "Value": "rl"}])
    session_id = arn.rsplit("/", 1)[1]
    assert arn == f"arn:loopwright:sessions::{alice.tenant.account_id}:session/{session_id}"
    detail = sm.describe_training_session(TrainingSessionName="exp-1")["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] in ("Created", "Scheduled")
    runtime.drain()
    detail = sm.describe_training_session(TrainingSessionName="exp-1")["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Running", detail
    assert detail["TrainingSessionName"] == "exp-1" and detail["TrainingSessionArn"] == arn
    assert detail["LoraConfig"] == {"Rank": 4, "Alpha": 8}
    assert detail["RoleArn"] == alice.role_arn
    assert detail["OutputConfig"] == {"S3Location": {"Path": "s3://my-bucket/out"}}
    assert detail["Tags"] == [{"Key": "team", "Value": "rl"}]
    assert detail["BillableTokenUsage"] == {
        "PrefillTokenCount": 0,
        "SampleTokenCount": 0,
        "TrainingTokenCount": 0,
    }
    assert "LastReceivedSequenceNumber" not in detail
    # by its id too (the last segment of its ARN, which is what the SDK passes back)
    same = sm.describe_training_session(TrainingSessionName=session_id)
    assert same["TrainingSessionDetail"]["TrainingSessionArn"] == arn
    # the Tinker API sees the same session and its model, and trains it
    seen = alice.get(f"sessions/{session_id}").json()
    assert seen["name"] == "exp-1" and seen["user_metadata"] == {"team": "rl"}
    (model_id,) = seen["model_ids"]
    info = alice.post("get_info", {"model_id": model_id}).json()
    assert info["lora_rank"] == 4 and info["model_name"] == TINY
    run = ModelRun.__new__(ModelRun)
    run.person, run.runtime, run.id, run.seq = alice, runtime, model_id, 0
    out = run.run(
        "forward_backward",
        forward_backward_input={"data": [datum([1, 2, 3])], "loss_fn": "cross_entropy"},
    )
    assert "loss:sum" in out["metrics"]
    detail = sm.describe_training_session(TrainingSessionName="exp-1")["TrainingSessionDetail"]
    assert detail["BillableTokenUsage"]["TrainingTokenCount"] == 3
    assert detail["LastReceivedSequenceNumber"] == 1


def test_a_tinker_session_is_listed_and_described(alice: Person, runtime) -> None:
    session_id = open_session(alice)
    sm = client_of(alice)
    listed = sm.list_training_sessions()["TrainingSessionSummaries"]
    assert [s["TrainingSessionArn"].rsplit("/", 1)[1] for s in listed] == [session_id]
    detail = sm.describe_training_session(TrainingSessionName=session_id)
    assert detail["TrainingSessionDetail"]["TrainingSessionStatus"] == "Created"
    ModelRun(alice, runtime, session_id)
    detail = sm.describe_training_session(TrainingSessionName=session_id)["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Running"
    assert detail["ModelConfig"]["BaseModelArn"].endswith("/Model/loopwright-tiny-byte-llama/1.0.0")


def test_names_are_unique_and_valid(alice: Person, runtime) -> None:
    sm = client_of(alice)
    create(sm, alice, "dup")
    with pytest.raises(ClientError) as caught:
        create(sm, alice, "dup")
    assert code(caught) == "ResourceInUse"
    for bad in ("-x", "a_b", "sess-0123456789abcdef01234567"):
        with pytest.raises(ClientError) as caught:
            create(sm, alice, bad)
        assert code(caught) in ("ValidationException", "ResourceInUse"), bad


def test_stop_twice_then_delete(alice: Person, runtime) -> None:
    sm = client_of(alice)
    create(sm, alice, "to-stop")
    runtime.drain()
    with pytest.raises(ClientError) as caught:
        sm.delete_training_session(TrainingSessionName="to-stop")
    assert code(caught) == "ValidationException"
    assert "from Running to Deleting" in caught.value.response["Error"]["Message"]
    sm.stop_training_session(TrainingSessionName="to-stop")
    with pytest.raises(ClientError) as caught:  # the second stop: what sagemaker-train tolerates
        sm.stop_training_session(TrainingSessionName="to-stop")
    assert code(caught) == "ValidationException"
    assert "invalid session state transition from Stopping to " in str(caught.value)
    runtime.drain()
    detail = sm.describe_training_session(TrainingSessionName="to-stop")["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Stopped" and "EndTime" in detail
    sm.delete_training_session(TrainingSessionName="to-stop")
    with pytest.raises(ClientError) as caught:
        sm.describe_training_session(TrainingSessionName="to-stop")
    assert code(caught) == "ResourceNotFound"
    assert sm.list_training_sessions()["TrainingSessionSummaries"] == []
    create(sm, alice, "to-stop")  # the name is free again


def test_listing_filters_and_pages(alice: Person, runtime) -> None:
    sm = client_of(alice)
    for i in range(5):
        create(sm, alice, f"run-{i}")
    runtime.drain()
    sm.stop_training_session(TrainingSessionName="run-1")
    names, token = [], None
    while True:
        page = sm.list_training_sessions(MaxResults=2, **({"NextToken": token} if token else {}))
        assert len(page["TrainingSessionSummaries"]) <= 2
        names += [s["TrainingSessionArn"] for s in page["TrainingSessionSummaries"]]
        token = page.get("NextToken")
        if not token:
            break
    assert len(names) == len(set(names)) == 5

    def count(status: str) -> int:
        return len(sm.list_training_sessions(StatusEquals=status)["TrainingSessionSummaries"])

    # the worker takes four models: the fifth waits for room
    assert (count("Running"), count("Stopping"), count("Scheduled")) == (3, 1, 1)
    only = sm.list_training_sessions(NameContains="UN-3")["TrainingSessionSummaries"]
    assert len(only) == 1
    with pytest.raises(ClientError) as caught:
        sm.list_training_sessions(NextToken="not-a-token")
    assert code(caught) == "ValidationException"


def test_our_limits_are_named(alice: Person, runtime) -> None:
    sm = client_of(alice)
    with pytest.raises(ClientError) as caught:
        sm.create_training_session(
            TrainingSessionName="big",
            LoraConfig={"Rank": 256, "Alpha": 8},
            RoleArn=alice.role_arn,
            ModelConfig={"BaseModelArn": hub_arn_of(sm)},
            OutputConfig={"S3Location": {"Path": "s3://my-bucket/o"}},
        )
    assert code(caught) == "ValidationException"
    assert "LoraConfig.Rank: at most 128" in str(caught.value)
    with pytest.raises(ClientError) as caught:
        sm.create_training_session(
            TrainingSessionName="nobase",
            LoraConfig={"Rank": 4, "Alpha": 8},
            RoleArn=alice.role_arn,
            ModelConfig={
                "BaseModelArn": "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/nope/1.0.0"
            },
            OutputConfig={"S3Location": {"Path": "s3://my-bucket/o"}},
        )
    assert code(caught) == "ValidationException" and "loopwright-tiny-byte-llama" in str(
        caught.value
    )


def test_a_missing_sequence_number_blocks_the_session_and_says_why(alice: Person, runtime) -> None:
    sm = client_of(alice)
    arn = create(sm, alice, "gappy")
    runtime.drain()
    (model_id,) = alice.get(f"sessions/{arn.rsplit('/', 1)[1]}").json()["model_ids"]
    r = alice.post(  # seq_id 2 arrives, 1 never does
        "forward_backward",
        {
            "model_id": model_id,
            "seq_id": 2,
            "forward_backward_input": {"data": [datum([1, 2])], "loss_fn": "cross_entropy"},
        },
    )
    assert r.status_code == 200, r.content
    runtime.drain()
    detail = sm.describe_training_session(TrainingSessionName="gappy")["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Blocked"
    assert "waits for seq_id 1" in detail["ErrorDetails"]
    assert detail["LastReceivedSequenceNumber"] == 2
    blocked = sm.list_training_sessions(StatusEquals="Blocked")["TrainingSessionSummaries"]
    assert [s["TrainingSessionArn"] for s in blocked] == [arn]


def test_a_member_denied_describing_is_told_nothing_of_what_exists(
    alice: Person, bob: Person, runtime
) -> None:
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Deny", "Action": "sessions:DescribeTrainingSession", "Resource": "*"}
        ],
    }
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-describe", {"document": deny}, format="json"
    )
    assert r.status_code in (200, 201), r.content
    create(client_of(alice), alice, "exists")
    bobs = client_of(bob)
    for name in ("exists", "does-not"):
        with pytest.raises(ClientError) as caught:
            bobs.describe_training_session(TrainingSessionName=name)
        assert code(caught) == "AccessDeniedException", name


def test_a_queued_session_is_scheduled_with_its_place_in_line(
    alice: Person, charlie: Person, runtime
) -> None:
    """No worker has room: the session waits in the placement queue, ``Scheduled``, and its
    ``ErrorDetails`` say why, where it stands and (once a model has ended) when it may start."""
    from controlplane.fleet.models import Worker

    Worker.objects.update(capacity=1)
    sm = client_of(alice)
    create(sm, alice, "holds")
    runtime.drain()
    create(sm, alice, "waits")
    detail = sm.describe_training_session(TrainingSessionName="waits")["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Scheduled"
    assert detail["ErrorDetails"] == (
        f"waiting for a free slot on an open-network worker: 1 serves {TINY}, it is full "
        "(1st of 1 in line)"
    )
    listed = sm.list_training_sessions(StatusEquals="Scheduled")["TrainingSessionSummaries"]
    assert [s["TrainingSessionArn"] for s in listed] == [detail["TrainingSessionArn"]]
    with pytest.raises(ClientError):
        client_of(charlie).describe_training_session(TrainingSessionName="waits")
    sm.stop_training_session(TrainingSessionName="holds")
    runtime.drain()
    runtime.beat()  # the slot is given to the session that waited
    runtime.drain()
    detail = sm.describe_training_session(TrainingSessionName="waits")["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Running" and "ErrorDetails" not in detail
