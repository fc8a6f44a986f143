"""A training model's data-parallel replicas through the API: stored, echoed by get_info and the
listings (with the group of workers once it has one), bounded by the wire type, the account's
max_replicas quota, the live workers of the base model and IAM (``sessions:Replicas``); a retry
must repeat it. charlie, another tenant, gets 404 for alice's models and session."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from controlplane.errors import DomainError
from controlplane.fleet.models import ReplicaGroup, Worker
from controlplane.fleet.services import worker_register
from controlplane.operations import training
from controlplane.tenants.models import Membership
from controlplane.training_sessions.models import Operation, TrainingModel
from loopwright.proto.fwdbwd import encode_forward_backward
from loopwright.types import ForwardBackwardInput
from tests.fleet import registration
from tests.support.callers import member
from tests.support.quotas import set_quota
from tests.support.wire import create_model, datum, open_session

pytestmark = pytest.mark.django_db

BASE = "acme/dp-base"  # served by workers with no process behind them: nothing runs


def serve(n: int, base: str = BASE, first: int = 0) -> list[Worker]:
    """``n`` live workers of ``base``."""
    return [
        worker_register(**registration(f"{base}-{i}", base, capacity=4)).worker
        for i in range(first, first + n)
    ]


def body(session_id: str, seq: int = 0, **extra) -> dict:
    return {
        "session_id": session_id,
        "model_seq_id": seq,
        "base_model": BASE,
        "lora_config": {"rank": 4},
        **extra,
    }


def refusals() -> float:
    found = REGISTRY.get_sample_value("loopwright_quota_refusals_total", {"limit": "max_replicas"})
    return found or 0.0


def test_replicas_are_stored_and_shown_with_the_group(alice, bob, charlie) -> None:
    serve(2)
    sid = open_session(alice)
    r = alice.post("create_model", body(sid, replicas=2))
    assert r.status_code == 200, r.content
    mid = r.json()["model_id"]
    model = TrainingModel.objects.select_related("worker__group").get(pk=mid)
    assert model.replicas == 2
    op = model.operations.get(kind=Operation.Kind.CREATE_MODEL)
    assert op.payload["replicas"] == 2 and op.plan["replicas"] == 2

    # placement formed a group of the two workers; the model is its coordinator's
    group = model.worker.group
    members = [{"name": w.name, "rank": w.rank} for w in group.members.order_by("rank")]
    assert [m["rank"] for m in members] == [0, 1] and members[0]["name"] == model.worker.name
    shown = {"id": group.pk, "state": "forming", "sharded": False, "members": members}
    info = bob.post("get_info", {"model_id": mid}).json()  # bob shares alice's tenant
    assert (info["replicas"], info["group"], info["worker"]) == (2, shown, model.worker.name)
    ReplicaGroup.objects.filter(pk=group.pk).update(state=ReplicaGroup.State.READY)
    shown["state"] = "ready"
    run = alice.get(f"training_runs/{mid}").json()
    assert (run["replicas"], run["group"]) == (2, shown)
    (listed,) = alice.get("training_runs").json()["training_runs"]
    assert (listed["replicas"], listed["group"]) == (2, shown)
    (in_session,) = alice.get(f"sessions/{sid}").json()["models"]
    assert (in_session["replicas"], in_session["group"]) == (2, shown)

    # a model of one replica on the same coordinator trains alone: it shows no group
    single = alice.post("create_model", body(sid, seq=1)).json()["model_id"]
    info = alice.post("get_info", {"model_id": single}).json()
    assert (info["replicas"], info["group"], info["worker"]) == (1, None, model.worker.name)

    assert charlie.post("get_info", {"model_id": mid}).status_code == 404
    assert charlie.get(f"training_runs/{mid}").status_code == 404
    assert charlie.get("training_runs").json()["training_runs"] == []
    theirs = charlie.post("create_model", body(sid, seq=2, replicas=2))
    assert theirs.status_code == 404 and theirs.json()["field"] == "session_id"


def test_one_replica_is_what_a_body_without_the_field_asks_for(alice, charlie, runtime) -> None:
    """The tinker SDKs never send ``replicas``: their models train on one worker, as before."""
    sid = open_session(alice)
    mid = create_model(alice, runtime, sid)  # sends no replicas; runs on the worker
    model = TrainingModel.objects.get(pk=mid)
    op = model.operations.get(kind=Operation.Kind.CREATE_MODEL)
    assert model.replicas == 1 and "replicas" not in op.payload and op.plan["replicas"] == 1
    assert op.status == Operation.Status.DONE
    info = alice.post("get_info", {"model_id": mid}).json()
    assert (info["replicas"], info["group"]) == (1, None)
    r = alice.post(
        "create_model", body(sid, seq=1, replicas=None) | {"base_model": model.base_model}
    )
    assert r.status_code == 200 and TrainingModel.objects.get(pk=r.json()["model_id"]).replicas == 1
    assert charlie.post("get_info", {"model_id": mid}).status_code == 404


def test_one_replica_never_counts_workers(alice, settings) -> None:
    """A model of one replica waits for a worker when none is live; more than one is refused."""
    (w,) = serve(1)
    Worker.objects.filter(pk=w.pk).update(state=Worker.State.GONE)
    settings.MAX_REPLICAS = 1
    sid = open_session(alice)
    r = alice.post("create_model", body(sid))
    assert r.status_code == 200, r.content
    assert TrainingModel.objects.get(pk=r.json()["model_id"]).worker_id is None  # it waits


@pytest.mark.parametrize("value", [0, -1, "two", 1.5, 1025])
def test_replicas_that_are_not_a_whole_number_from_1_are_refused(alice, charlie, value) -> None:
    serve(2)
    sid = open_session(alice)
    r = alice.post("create_model", body(sid, replicas=value))
    assert r.status_code == 400, r.content
    assert (r.json()["code"], r.json()["field"]) == ("invalid_request", "replicas")
    assert not TrainingModel.objects.filter(session_id=sid).exists()
    assert charlie.post("create_model", body(sid, replicas=2)).status_code == 404


@pytest.mark.parametrize("value", [0, -1, "two", 1.5, True, None])
def test_the_service_refuses_what_the_wire_type_would(alice, value) -> None:
    serve(2)
    sid = open_session(alice)
    with pytest.raises(DomainError) as refused:
        training.model_create(
            tenant=alice.tenant,
            session_id=sid,
            model_seq_id=0,
            base_model=BASE,
            lora={"rank": 4},
            replicas=value,
        )
    assert refused.value.status == 400 and refused.value.field == "replicas"


def test_replicas_above_the_quota_are_refused_naming_the_limit(alice, charlie, settings) -> None:
    settings.MAX_REPLICAS = 2
    serve(4)
    sid = open_session(alice)
    before = refusals()
    r = alice.post("create_model", body(sid, replicas=3))
    assert r.status_code == 400, r.content  # not a 429: sending it again never passes
    assert (r.json()["code"], r.json()["field"]) == ("quota_exceeded", "replicas")
    assert "limit of account" in r.json()["detail"]
    assert "2 replicas per training model" in r.json()["detail"]
    assert refusals() == before + 1
    assert not TrainingModel.objects.filter(session_id=sid).exists()

    set_quota(alice, "--max-replicas", "4")
    assert alice.post("create_model", body(sid, replicas=3)).status_code == 200
    other = open_session(charlie)  # charlie still has the setting's 2
    r = charlie.post("create_model", body(other, replicas=3))
    assert r.status_code == 400 and r.json()["code"] == "quota_exceeded"


def test_replicas_above_the_live_workers_are_refused_naming_them(alice, charlie) -> None:
    workers = serve(2)
    serve(3, base="acme/other-base")  # another base model's workers do not count
    sid = open_session(alice)
    r = alice.post("create_model", body(sid, replicas=3))
    assert r.status_code == 400, r.content
    assert (r.json()["code"], r.json()["field"]) == ("not_enough_workers", "replicas")
    assert f"2 live workers serve {BASE}" in r.json()["detail"]
    # a worker whose lease ran out is not live
    Worker.objects.filter(pk=workers[0].pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    r = alice.post("create_model", body(sid, replicas=2))
    assert r.status_code == 400 and f"1 live worker serves {BASE}" in r.json()["detail"]
    assert not TrainingModel.objects.filter(session_id=sid).exists()
    assert alice.post("create_model", body(sid, replicas=1)).status_code == 200
    assert charlie.post("create_model", body(sid, seq=1, replicas=1)).status_code == 404


def test_a_retry_must_ask_for_the_same_replicas(alice, charlie) -> None:
    serve(2)
    sid = open_session(alice)
    first = alice.post("create_model", body(sid, replicas=2))
    again = alice.post("create_model", body(sid, replicas=2))
    assert first.status_code == again.status_code == 200
    assert first.json()["request_id"] == again.json()["request_id"]
    other = alice.post("create_model", body(sid, replicas=1))
    assert other.status_code == 409 and other.json()["code"] == "conflict", other.content
    assert TrainingModel.objects.get(session_id=sid).replicas == 2
    assert charlie.post("create_model", body(sid, replicas=2)).status_code == 404
    # one replica, said or not, is the request it always was (its digest has no replicas)
    plain = alice.post("create_model", body(sid, seq=1))
    said = alice.post("create_model", body(sid, seq=1, replicas=1))
    assert plain.json()["request_id"] == said.json()["request_id"]
    op = Operation.objects.get(pk=plain.json()["request_id"])
    assert "replicas" not in op.payload


def test_a_policy_bounds_replicas_with_sessions_replicas(alice, bob, charlie) -> None:
    serve(4)
    # bob, a member: a Deny above two replicas
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Action": "sessions:CreateModel",
                "Resource": "*",
                "Condition": {"NumericGreaterThan": {"sessions:Replicas": 2}},
            }
        ],
    }
    path = "/api/v1/iam/users/bob@example.com/policies/replicas"
    assert alice.client.put(path, {"document": deny}, format="json").status_code == 200
    sid = open_session(bob)
    r = bob.post("create_model", body(sid, replicas=3))
    assert r.status_code == 403 and r.json()["code"] == "access_denied", r.content
    assert "sessions:CreateModel" in r.json()["detail"]
    assert bob.post("create_model", body(sid, replicas=2)).status_code == 200

    # vera may only read, and create models of at most two replicas
    vera = member("vera", alice, Membership.Role.BILLING_VIEWER)
    allow = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sessions:CreateTrainingSession", "iam:PassRole"],
                "Resource": "*",
            },
            {
                "Effect": "Allow",
                "Action": "sessions:CreateModel",
                "Resource": "*",
                "Condition": {"NumericLessThanEquals": {"sessions:Replicas": 2}},
            },
        ],
    }
    path = "/api/v1/iam/users/vera@example.com/policies/small"
    assert alice.client.put(path, {"document": allow}, format="json").status_code == 200
    sid = open_session(vera)
    assert vera.post("create_model", body(sid, replicas=3)).status_code == 403
    assert vera.post("create_model", body(sid, replicas=2)).status_code == 200
    assert vera.post("create_model", body(sid, seq=1)).status_code == 200  # not sent: 1
    assert charlie.post("create_model", body(sid, seq=2, replicas=1)).status_code == 404


def test_protobuf_clients_send_no_replicas_and_keep_working(alice, charlie) -> None:
    """tinker ≥ 0.25 sends create_model as JSON without the field, and forward_backward as
    protobuf, which has no such field: both are taken, on a model of one replica or more."""
    serve(2)
    sid = open_session(alice)
    tinker_body = body(sid)  # what tinker's CreateModelRequest dumps (no replicas)
    made = alice.post("create_model", tinker_body)
    assert made.status_code == 200 and TrainingModel.objects.get(session_id=sid).replicas == 1
    wide = alice.post("create_model", body(sid, seq=1, replicas=2)).json()["model_id"]
    batch = ForwardBackwardInput.model_validate(
        {"data": [datum([1, 2, 3])], "loss_fn": "cross_entropy"}
    )
    for mid in (made.json()["model_id"], wide):
        r = alice.client.post(
            "/api/v1/forward_backward",
            encode_forward_backward(mid, 1, batch),
            content_type="application/x-protobuf",
            HTTP_CONTENT_ENCODING="zstd",
        )
        assert r.status_code == 200, r.content
        assert Operation.objects.get(pk=r.json()["request_id"]).kind == "forward_backward"
        theirs = charlie.client.post(
            "/api/v1/forward_backward",
            encode_forward_backward(mid, 2, batch),
            content_type="application/x-protobuf",
            HTTP_CONTENT_ENCODING="zstd",
        )
        assert theirs.status_code == 404
