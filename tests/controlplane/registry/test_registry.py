"""Every save but an ephemeral sampler's is a versioned model package: numbering, groups, approvals under IAM, lineage,
loading and sampling by a version's ARN, expiry and concurrent numbering."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection, connections
from django.utils import timezone

from controlplane.housekeeping.janitor import sweep
from controlplane.registry import services
from controlplane.registry.models import ModelPackage
from controlplane.training_sessions.models import Checkpoint, Session, TrainingModel
from tests.support.callers import Person
from tests.support.tiny_worker import TINY
from tests.support.wire import ModelRun, datum, result

pytestmark = pytest.mark.django_db

TOKENS = [3, 1, 4, 1, 5, 9, 2, 6]
GROUPS = "registry/model-package-groups"


class Run(ModelRun):
    """A training model that also trains and reads its outputs."""

    def train(self, lr: float = 0.05) -> None:
        data = {"data": [datum(TOKENS)], "loss_fn": "cross_entropy"}
        assert "metrics" in self.run("forward_backward", forward_backward_input=data)
        assert "metrics" in self.run("optim_step", adam_params={"learning_rate": lr})

    def outputs(self) -> list[float]:
        data = {"data": [datum(TOKENS)], "loss_fn": "cross_entropy"}
        return self.run("forward", forward_input=data)["loss_fn_outputs"][0]["logprobs"]["data"]


def session(person: Person, **platform) -> str:
    body = {"tags": [], "sdk_version": "test", "role_arn": person.role_arn, **platform}
    r = person.post("create_session", body)
    assert r.status_code == 200, r.content
    return r.json()["session_id"]


def group_arn(person: Person, name: str) -> str:
    return f"arn:loopwright:registry::{person.tenant.account_id}:model-package-group/{name}"


def version_arn(person: Person, group: str, version: int) -> str:
    return f"arn:loopwright:registry::{person.tenant.account_id}:model-package/{group}/{version}"


def versions(person: Person, group: str, **params) -> dict:
    r = person.get(f"{GROUPS}/{group}/versions", params)
    assert r.status_code == 200, r.content
    return r.json()


def test_saves_register_numbered_versions_in_the_runs_group(
    alice: Person, charlie: Person, runtime
) -> None:
    run = Run(alice, runtime, session(alice))
    group = f"run-{run.id}"
    run.train()
    first = run.run("save_weights", path="a")
    run.run("save_weights_for_sampler", path="b", merge_weights=True)
    run.run("save_weights_for_sampler", path="c")
    listed = versions(alice, group)
    assert [v["version"] for v in listed["model_packages"]] == [3, 2, 1]
    assert listed["cursor"]["total_count"] == 3
    v1, v2, v3 = reversed(listed["model_packages"])
    assert (v1["kind"], v2["kind"], v3["kind"]) == ("training_state", "merged", "sampler_weights")
    assert v1["tinker_path"] == first["path"] == f"tinker://{run.id}/weights/a"
    assert v3["tinker_path"] == f"tinker://{run.id}/sampler_weights/c"
    assert (v1["step"], v2["step"], v3["step"]) == (3, 4, 5)
    assert v1["base_model"] == TINY and v1["lora"]["rank"] == 4 and v1["model_id"] == run.id
    assert v1["model_package_arn"] == version_arn(alice, group, 1)
    assert v1["model_package_group_arn"] == group_arn(alice, group)
    loss = v1["metrics"]["loss:sum"]
    assert loss > 0 and v1["approval_status"] == "PendingManualApproval"
    assert v1["created_by"] == alice.role_arn and v1["weights_available"]
    assert v1["kms_key_arn"].startswith("arn:loopwright:kms::") and v1["size_bytes"] > 0
    assert v1["parent_model_package_arn"] is None and v1["expires_at"] is None
    # filters, paging, describe by number, by tinker:// path and by ARN
    assert [
        v["version"] for v in versions(alice, group, kind="sampler_weights")["model_packages"]
    ] == [3]
    page = versions(alice, group, limit=1, offset=1)
    assert [v["version"] for v in page["model_packages"]] == [2]
    assert versions(alice, group, approval_status="Approved")["model_packages"] == []
    r = alice.get(f"{GROUPS}/{group}/versions", {"kind": "lora"})
    assert r.status_code == 400 and r.json()["field"] == "kind"
    assert alice.get(f"{GROUPS}/{group}/versions/2").json()["kind"] == "merged"
    for path in (v3["tinker_path"], v3["model_package_arn"]):
        r = alice.get(f"registry/model-packages/by-path?path={quote(path, safe='')}")
        assert r.status_code == 200 and r.json()["version"] == 3, r.content
    described = alice.get(f"{GROUPS}/{group}").json()
    assert described["version_count"] == 3 and described["latest_version"] == 3

    # ephemeral sampler weights (saved only to sample from) are no version: reachable by their
    # tinker:// path, in the owner's account alone, until their time-to-live ends
    eph = run.run("save_weights_for_sampler", sampling_session_seq_id=0)
    assert eph["sampling_session_id"]
    [ephemeral] = Checkpoint.objects.filter(model_id=run.id, name__startswith="ephemeral-")
    path = ephemeral.tinker_path
    assert ephemeral.expires_at is not None
    assert alice.get(f"{GROUPS}/{group}/versions/4").status_code == 404
    assert versions(alice, group)["cursor"]["total_count"] == 3
    by_path = f"registry/model-packages/by-path?path={quote(path, safe='')}"
    assert alice.get(by_path).status_code == 404
    assert not ModelPackage.objects.filter(tinker_path=path).exists()
    assert alice.post("weights_info", {"tinker_path": path}).status_code == 200
    assert charlie.post("weights_info", {"tinker_path": path}).status_code == 404
    assert charlie.get(by_path).status_code == 404
    assert charlie.get(f"{GROUPS}/{group}").status_code == 404
    Checkpoint.objects.filter(tinker_path=path).update(expires_at=timezone.now() - timedelta(1))
    assert sweep()["expired_checkpoints"] == [path]
    assert alice.post("weights_info", {"tinker_path": path}).status_code == 404

    # deleting: a version; a group only when empty or forced; numbers are never reused
    assert alice.client.delete(f"/api/v1/{GROUPS}/{group}/versions/3").status_code == 204
    assert alice.get(f"{GROUPS}/{group}/versions/3").status_code == 404
    run.run("save_weights", path="d")
    assert versions(alice, group)["model_packages"][0]["version"] == 4
    r = alice.client.delete(f"/api/v1/{GROUPS}/{group}")
    assert r.status_code == 409 and r.json()["field"] == "force"
    r = alice.client.delete(f"/api/v1/{GROUPS}/{group}?force=yes")
    assert r.status_code == 400 and r.json()["field"] == "force"
    assert alice.client.delete(f"/api/v1/{GROUPS}/{group}?force=true").status_code == 204
    assert alice.get(f"{GROUPS}/{group}").status_code == 404
    assert Checkpoint.objects.filter(model_id=run.id).count() == 4  # the weights stay (a, b, c, d)


def test_groups_are_validated_and_listed(alice: Person) -> None:
    body = {"name": "prod-chat", "description": "served", "tags": [{"key": "team", "value": "x"}]}
    r = alice.post(GROUPS, body)
    assert r.status_code == 201, r.content
    assert r.json()["model_package_group_arn"] == group_arn(alice, "prod-chat")
    assert r.json()["tags"] == body["tags"] and r.json()["version_count"] == 0
    assert alice.post(GROUPS, {"name": "prod-chat"}).status_code == 409
    for bad, field, words in [
        ({"name": "-x"}, "name", "[A-Za-z0-9]"),
        ({"name": "a" * 64}, "name", "63"),
        ({"name": "ok", "description": "d" * 1025}, "description", "1024"),
        ({"name": "ok", "tags": [{"key": ""}]}, "tags[0].key", "at least 1 character"),
        ({"name": "ok", "tags": [{"key": "k", "value": "v" * 257}]}, "tags[0].value", "256"),
        ({"name": "ok", "tags": [{"key": "k", "colour": "red"}]}, "tags[0].colour", "unknown"),
        ({"name": "ok", "owner": "me"}, "owner", "unknown"),
    ]:
        r = alice.post(GROUPS, bad)
        assert r.status_code == 400 and r.json()["field"] == field, (bad, r.content)
        assert words in r.json()["detail"], r.json()
    listed = alice.get(GROUPS).json()
    assert [g["model_package_group_name"] for g in listed["model_package_groups"]] == ["prod-chat"]
    assert alice.get(GROUPS, {"limit": "0"}).json()["field"] == "limit"
    assert alice.client.delete(f"/api/v1/{GROUPS}/prod-chat").status_code == 204


def test_a_sessions_group_is_checked_and_made_on_first_use(
    alice: Person, charlie: Person, runtime
) -> None:
    field = "model_package_group_arn"
    account = alice.tenant.account_id
    for bad in (
        "prod",
        f"arn:loopwright:kms::{account}:key/1",
        f"arn:loopwright:registry::{account}:model-package-group/bad_name",
    ):
        r = alice.post(
            "create_session",
            {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn, field: bad},
        )
        assert r.status_code == 400 and r.json()["field"] == field, (bad, r.content)
    r = alice.post(
        "create_session",
        {
            "tags": [],
            "sdk_version": "t",
            "role_arn": alice.role_arn,
            field: group_arn(charlie, "x"),
        },
    )
    assert r.status_code == 404 and r.json()["field"] == field, r.content

    sid = session(alice, **{field: group_arn(alice, "prod-chat")})
    assert alice.get(f"{GROUPS}/prod-chat").status_code == 404  # not yet
    first, second = Run(alice, runtime, sid), Run(alice, runtime, sid, seq=1)
    first.run("save_weights", path="a")
    second.run("save_weights", path="a")
    found = versions(alice, "prod-chat")["model_packages"]
    assert [(v["version"], v["model_id"]) for v in found] == [(2, second.id), (1, first.id)]
    assert alice.get(f"{GROUPS}/prod-chat").json()["created_by"] == alice.role_arn
    assert alice.get(f"{GROUPS}/run-{first.id}").status_code == 404


def test_approval_is_authorized_recorded_and_audited(alice: Person, bob: Person, runtime) -> None:
    run = Run(alice, runtime, session(alice))
    run.run("save_weights", path="a")
    url = f"/api/v1/{GROUPS}/run-{run.id}/versions/1"
    arn = version_arn(alice, f"run-{run.id}", 1)
    for status in ("Approved", "Rejected", "PendingManualApproval", "Approved"):
        r = alice.client.patch(
            url, {"approval_status": status, "approval_description": f"now {status}"}, format="json"
        )
        assert r.status_code == 200, r.content
        assert r.json()["approval_status"] == status
        assert r.json()["approval_description"] == f"now {status}"
        assert r.json()["approval_updated_by"].endswith(":user/alice@example.com")
    for body, field in [
        ({"approval_status": "Approve"}, "approval_status"),
        ({}, "approval_status"),
        (
            {"approval_status": "Approved", "approval_description": "x" * 1025},
            "approval_description",
        ),
        ({"approval_status": "Approved", "note": "x"}, "note"),
    ]:
        r = alice.client.patch(url, body, format="json")
        assert r.status_code == 400 and r.json()["field"] == field, (body, r.content)
    # bob (a member) may, until alice denies him this one action
    r = bob.client.patch(url, {"approval_status": "Rejected"}, format="json")
    assert r.status_code == 200 and r.json()["approval_updated_by"].endswith(
        ":user/bob@example.com"
    )
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "NoApprovals",
                "Effect": "Deny",
                "Action": "registry:UpdateModelPackageApproval",
                "Resource": "*",
            }
        ],
    }
    r = alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-approvals", {"document": deny}, format="json"
    )
    assert r.status_code == 200, r.content
    r = bob.client.patch(url, {"approval_status": "Approved"}, format="json")
    assert r.status_code == 403, r.content
    assert "registry:UpdateModelPackageApproval" in r.json()["detail"] and arn in r.json()["detail"]
    assert alice.get(url.removeprefix("/api/v1/")).json()["approval_status"] == "Rejected"
    assert bob.get(url.removeprefix("/api/v1/")).status_code == 200  # still reads it
    events = alice.get("audit/events", {"action": "registry:UpdateModelPackageApproval"}).json()
    by_bob = [e for e in events["events"] if e["principal"].endswith(":user/bob@example.com")]
    assert [(e["allowed"], e["resource"]) for e in by_bob] == [(False, arn), (True, arn)]
    assert by_bob[0]["statement"] == "NoApprovals" and by_bob[0]["policy"] == "no-approvals"


def test_a_session_role_must_be_allowed_to_register_its_saves(alice: Person, runtime) -> None:
    no_registry = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["sessions:*", "kms:*"], "Resource": "*"}],
    }
    r = alice.post("iam/roles", {"name": "no-registry", "policies": {"train": no_registry}})
    assert r.status_code == 201, r.content
    r = alice.post("create_session", {"tags": [], "sdk_version": "t", "role_arn": r.json()["arn"]})
    run = Run(alice, runtime, r.json()["session_id"])
    r = run.submit("save_weights", path="a")
    assert r.status_code == 403, r.content
    detail = r.json()["detail"]
    assert "role/no-registry" in detail and "registry:CreateModelPackage" in detail
    assert group_arn(alice, f"run-{run.id}") in detail
    assert not ModelPackage.objects.exists() and not Checkpoint.objects.exists()


def test_load_and_sample_by_version_arn_with_lineage(
    alice: Person, charlie: Person, runtime
) -> None:
    sid = session(alice)
    run = Run(alice, runtime, sid)
    group = f"run-{run.id}"
    run.train()
    run.run("save_weights", path="a")  # version 1
    saved = run.outputs()
    run.train(lr=0.5)
    assert run.outputs() != saved
    v1 = version_arn(alice, group, 1)
    assert run.run("load_weights", path=v1, optimizer=True)["path"] == v1
    assert run.outputs() == saved
    run.run("save_weights", path="b")  # version 2, loaded from version 1
    v2 = alice.get(f"{GROUPS}/{group}/versions/2").json()
    assert v2["parent_model_package_arn"] == v1
    info = alice.post("weights_info", {"tinker_path": v1}).json()
    assert info["base_model"] == TINY and info["checkpoint_type"] == "training"

    # a new model resumed from a tinker:// path also records the version it came from
    other = Run(alice, runtime, sid, seq=1)
    other.run("load_weights", path=f"tinker://{run.id}/weights/b", optimizer=False)
    assert other.outputs() == run.outputs()
    other.run("save_weights", path="c")
    child = versions(alice, f"run-{other.id}")["model_packages"][0]
    assert child["parent_model_package_arn"] == version_arn(alice, group, 2)

    # sampler weights: sample by ARN; not loadable for training with the optimizer
    run.run("save_weights_for_sampler", path="s")  # version 3
    v3 = version_arn(alice, group, 3)
    r = alice.post(
        "create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "model_path": v3},
    )
    assert r.status_code == 200, r.content
    sample = {
        "sampling_session_id": r.json()["sampling_session_id"],
        "seq_id": 1,
        "prompt": {"chunks": [{"tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 3, "seed": 1, "stop": []},
    }
    out = result(alice, runtime, alice.post("asample", sample).json())
    assert len(out["sequences"][0]["tokens"]) == 3, out
    r = run.submit("load_weights", path=v3, optimizer=True)
    assert r.status_code == 400 and "sampler weights" in r.json()["detail"], r.content

    # an overwritten checkpoint no longer holds the older version's weights
    run.run("save_weights", path="a", overwrite=True)  # version 4
    assert not alice.get(f"{GROUPS}/{group}/versions/1").json()["weights_available"]
    r = run.submit("load_weights", path=v1, optimizer=False)
    assert r.status_code == 404 and r.json()["field"] == "path" and "weights" in r.json()["detail"]
    r = run.submit("load_weights", path=version_arn(alice, group, 99), optimizer=False)
    assert r.status_code == 404 and r.json()["field"] == "path"

    # another tenant cannot use alice's versions, whatever the route
    v4 = version_arn(alice, group, 4)
    charlie_sid = session(charlie)
    assert charlie.post("weights_info", {"tinker_path": v4}).status_code == 404
    r = charlie.post(
        "create_sampling_session",
        {"session_id": charlie_sid, "sampling_session_seq_id": 0, "model_path": v4},
    )
    assert r.status_code == 404 and r.json()["field"] == "model_path"
    mine = Run(charlie, runtime, charlie_sid)
    r = mine.submit("load_weights", path=v4, optimizer=False)
    assert r.status_code == 404 and r.json()["field"] == "path"


@pytest.mark.django_db(transaction=True)
def test_concurrent_saves_into_one_group_get_distinct_versions(alice: Person) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("concurrent numbering needs PostgreSQL's row locks")
    sess = Session.objects.create(tenant=alice.tenant, platform={"role_arn": alice.role_arn})
    model = TrainingModel.objects.create(
        tenant=alice.tenant, session=sess, model_seq_id=0, base_model=TINY, lora={"rank": 4}
    )
    checkpoints = [
        Checkpoint.objects.create(
            tenant=alice.tenant,
            model=model,
            kind=Checkpoint.Kind.TRAINING,
            name=f"c{i}",
            tinker_path=f"tinker://{model.id}/weights/c{i}",
            storage_path=f"/nowhere/c{i}",
            lora=model.lora,
            base_model=TINY,
        )
        for i in range(12)
    ]

    def register(checkpoint: Checkpoint) -> int:
        try:
            return services.package_create(
                tenant=alice.tenant,
                actor=alice.role_arn,
                group_name="shared",
                checkpoint=checkpoint,
                kind=ModelPackage.Kind.TRAINING_STATE,
                model_id=model.id,
            ).version
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=6) as pool:
        numbers = list(pool.map(register, checkpoints))
    assert sorted(numbers) == list(range(1, 13))
    assert alice.get(f"{GROUPS}/shared").json()["latest_version"] == 12
