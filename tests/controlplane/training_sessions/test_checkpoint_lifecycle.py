"""Checkpoint lifecycle against local and S3 storage (moto): a checkpoint's expiry is set and
removed without loading it; expiry and a group's retention rule (keep the newest N, keep
approved versions) delete the weights from the store with an audit event, and never an
approved version's unless its group's rule says so; what is deleted stops being metered."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.housekeeping.janitor import sweep
from controlplane.metering.models import StoredObject
from controlplane.registry.models import ModelPackage
from controlplane.storage import s3_clients_close
from controlplane.tenants.services import storage_location_register
from controlplane.training_sessions.models import Checkpoint, Operation
from controlplane.training_sessions.services.retention import checkpoints_expire
from tests.storage.s3_server import bucket, s3, s3_endpoint
from tests.support.wire import ModelRun

__all__ = ["bucket", "s3", "s3_endpoint"]  # fixtures: moto's S3 server, one per module

pytestmark = pytest.mark.django_db

GROUP = "lifecycle"


@pytest.fixture(params=["local", "s3"])
def store(request, people, settings, monkeypatch) -> dict:
    """Where the session keeps its checkpoints, and how to list what is stored there."""
    if request.param == "local":
        root = Path(settings.STORAGE_DIR)
        return {
            "platform": {},
            "stored": lambda: {p.parent.name for p in root.rglob("adapter_config.json")},
        }
    endpoint, bucket_name = (
        request.getfixturevalue("s3_endpoint"),
        request.getfixturevalue("bucket"),
    )
    client = request.getfixturevalue("s3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings.S3_ENDPOINT_URL = endpoint
    settings.S3_REGION = "us-east-1"
    storage_location_register(tenant=people[0].tenant, uri=f"s3://{bucket_name}")
    request.addfinalizer(s3_clients_close)

    def stored() -> set[str]:
        listed = client.list_objects_v2(Bucket=bucket_name).get("Contents", [])
        return {o["Key"].split("/")[-2] for o in listed if o["Key"].endswith("adapter_config.json")}

    return {"platform": {"s3_output_path": f"s3://{bucket_name}/runs"}, "stored": stored}


def _run(alice, runtime, store: dict) -> ModelRun:
    arn = f"arn:loopwright:registry::{alice.tenant.account_id}:model-package-group/{GROUP}"
    body = {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn, **store["platform"]}
    sid = alice.post("create_session", body | {"model_package_group_arn": arn}).json()["session_id"]
    return ModelRun(alice, runtime, sid)


def _ttl(alice, path: str, ttl: int | None):
    model, _, rest = path.removeprefix("tinker://").partition("/")
    url = f"/api/v1/training_runs/{model}/checkpoints/{rest}/ttl"
    return alice.client.put(url, {"ttl_seconds": ttl}, format="json")


def test_an_expiry_is_set_and_removed_without_loading_anything(alice, runtime, store) -> None:
    run = _run(alice, runtime, store)
    path = run.run("save_weights", path="s1")["path"]
    ops = Operation.objects.count()
    r = _ttl(alice, path, 7200)
    assert r.status_code == 200, r.content
    ckpt = Checkpoint.objects.get(tinker_path=path)
    left = ckpt.expires_at - timezone.now()
    assert timedelta(seconds=7190) < left <= timedelta(seconds=7200)
    assert r.json() == {"tinker_path": path, "expires_at": ckpt.expires_at.isoformat()}
    assert ModelPackage.objects.get(checkpoint=ckpt).expires_at == ckpt.expires_at
    assert Operation.objects.count() == ops  # nothing ran on a worker
    listed = alice.get(f"training_runs/{run.id}/checkpoints").json()["checkpoints"]
    assert listed[0]["expires_at"] == ckpt.expires_at.isoformat()
    assert _ttl(alice, path, None).json()["expires_at"] is None
    assert Checkpoint.objects.get(tinker_path=path).expires_at is None
    for bad in (59, 3599, 10 * 366 * 86400):
        refused = _ttl(alice, path, bad)
        assert refused.status_code == 400 and refused.json()["field"] == "ttl_seconds"
    missing = alice.client.put(
        f"/api/v1/training_runs/{run.id}/checkpoints/weights/nope/ttl",
        {"ttl_seconds": 3600},
        format="json",
    )
    assert missing.status_code == 404


def test_expiry_deletes_from_the_store_with_an_audit_event_but_keeps_approved(
    alice, runtime, store
) -> None:
    run = _run(alice, runtime, store)
    paths = [run.run("save_weights", path=name)["path"] for name in ("a", "b", "c")]
    assert store["stored"]() == {"a", "b", "c"}
    r = alice.client.patch(
        f"/api/v1/registry/model-package-groups/{GROUP}/versions/2",
        {"approval_status": "Approved"},
        format="json",
    )
    assert r.status_code == 200
    for path in paths[:2]:
        assert _ttl(alice, path, 3600).status_code == 200
    later = timezone.now() + timedelta(hours=2)
    assert checkpoints_expire(now=later) == [paths[0]]  # b is approved: kept past its expiry
    assert store["stored"]() == {"b", "c"}
    event = AuditEvent.objects.get(action="sessions:ExpireCheckpoint")
    assert event.principal == "system:loopwright" and paths[0] in event.reason
    assert event.resource.endswith(f":checkpoint/{run.id}/a")
    assert StoredObject.objects.filter(stored_until=None).count() == 2  # a is no longer metered
    version = alice.get(f"registry/model-package-groups/{GROUP}/versions/1").json()
    assert version["weights_available"] is False

    r = alice.client.put(
        f"/api/v1/registry/model-package-groups/{GROUP}/retention",
        {"keep_approved": False},
        format="json",
    )
    assert r.json() == r.json() | {"keep_last": None, "keep_approved": False}
    assert checkpoints_expire(now=later) == [paths[1]]  # asked: approved ones go too
    assert store["stored"]() == {"c"}


def test_retention_keeps_the_newest_and_approved_versions(alice, runtime, store) -> None:
    run = _run(alice, runtime, store)
    for name in ("v1", "v2", "v3", "v4", "v5"):
        run.run("save_weights", path=name)
    alice.client.patch(
        f"/api/v1/registry/model-package-groups/{GROUP}/versions/1",
        {"approval_status": "Approved"},
        format="json",
    )
    url = f"/api/v1/registry/model-package-groups/{GROUP}/retention"
    assert alice.get(url.removeprefix("/api/v1/")).json()["keep_last"] is None
    r = alice.client.put(url, {"keep_last": 2}, format="json")
    assert r.status_code == 200 and r.json()["keep_approved"] is True
    sweep()
    assert store["stored"]() == {"v1", "v4", "v5"}
    reasons = list(
        AuditEvent.objects.filter(action="registry:ApplyRetentionRule").values_list(
            "reason", flat=True
        )
    )
    assert len(reasons) == 2 and all("newest 2" in reason for reason in reasons)
    versions = alice.get(f"registry/model-package-groups/{GROUP}/versions").json()
    available = {v["version"]: v["weights_available"] for v in versions["model_packages"]}
    assert available == {1: True, 2: False, 3: False, 4: True, 5: True}
    sweep()  # nothing more
    assert AuditEvent.objects.filter(action="registry:ApplyRetentionRule").count() == 2

    assert (
        alice.client.put(url, {"keep_last": 2, "keep_approved": False}, format="json").status_code
        == 200
    )
    sweep()
    assert store["stored"]() == {"v4", "v5"}
    assert alice.client.delete(url).status_code == 204
    assert alice.get(url.removeprefix("/api/v1/")).json()["keep_last"] is None
    for bad in ({"keep_last": 0}, {"keep_last": "2"}, {"keep": 1}):
        refused = alice.client.put(url, bad, format="json")
        assert refused.status_code == 400, (bad, refused.content)


def test_retention_rules_need_their_iam_actions(alice, bob, runtime, store) -> None:
    _run(alice, runtime, store).run("save_weights", path="x")
    deny = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Action": "registry:PutRetentionRule", "Resource": "*"}],
    }
    alice.client.put(
        "/api/v1/iam/users/bob@example.com/policies/no-rules", {"document": deny}, format="json"
    )
    url = f"/api/v1/registry/model-package-groups/{GROUP}/retention"
    assert bob.client.get(url).status_code == 200
    refused = bob.client.put(url, {"keep_last": 1}, format="json")
    assert refused.status_code == 403 and "registry:PutRetentionRule" in refused.json()["detail"]
