"""The registry pages: groups, a group's versions with their metadata, approval and downloads;
charlie sees none of acme's and gets 404s; a billing viewer may look but not approve."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.registry import services
from controlplane.registry.models import ModelPackage
from controlplane.tenants.models import Membership
from controlplane.training_sessions.models import Checkpoint, Session, TrainingModel
from tests.support.pages import member

pytestmark = pytest.mark.django_db

BASE = "loopwright/tiny-byte-llama"


def seed_versions(person, group: str, count: int, folder: Path) -> list[ModelPackage]:
    """``count`` versions of ``group`` in ``person``'s tenant, each a checkpoint whose adapter
    files lie unsealed in a folder under ``folder``, as saved before manifests were kept."""
    session = Session.objects.create(tenant=person.tenant, platform={"role_arn": person.role_arn})
    model = TrainingModel.objects.create(
        tenant=person.tenant, session=session, model_seq_id=0, base_model=BASE, lora={"rank": 8}
    )
    made = []
    for i in range(1, count + 1):
        where = folder / f"{model.id}-{i}"
        where.mkdir(parents=True)
        for name in ("adapter_model.safetensors", "adapter_config.json", "loopwright.json"):
            (where / name).write_bytes(f"{name} of step {i}".encode())
        checkpoint = Checkpoint.objects.create(
            tenant=person.tenant,
            model=model,
            kind=Checkpoint.Kind.TRAINING,
            name=f"step-{i}",
            tinker_path=f"tinker://{model.id}/weights/step-{i}",
            storage_path=str(where),
            size_bytes=1_234_567 * i,
            lora=model.lora,
            base_model=BASE,
        )
        made.append(
            services.package_create(
                tenant=person.tenant,
                actor=person.role_arn,
                group_name=group,
                checkpoint=checkpoint,
                kind=ModelPackage.Kind.TRAINING_STATE,
                session_id=session.id,
                model_id=model.id,
                step=i * 10,
                metrics={"loss": 1.0 / i},
            )
        )
    return made


@pytest.fixture
def versions(alice, tmp_path) -> list[ModelPackage]:
    return seed_versions(alice, "my-rl", 2, tmp_path / "ckpt")


def test_logged_out_goes_to_login(client) -> None:
    for url in ("/registry", "/registry/groups/x", "/registry/groups/x/versions/1"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/login?next=/registry")


def test_groups_and_versions_show_their_metadata(alice, versions) -> None:
    page = alice.get("/registry").content.decode()
    assert "my-rl" in page and "v2" in page
    page = alice.get("/registry/groups/my-rl").content.decode()
    v1, v2 = versions
    for text in (
        v1.session_id,
        v1.model_id,
        v1.tinker_path,
        v2.tinker_path,
        "PendingManualApproval",
    ):
        assert text in page
    assert "1.2\xa0MB" in page and "2.4\xa0MB" in page  # sizes
    assert "/registry/groups/my-rl/versions/2/download?format=adapter" in page
    page = alice.get("/registry/groups/my-rl/versions/2").content.decode()
    assert f"arn:loopwright:registry::{alice.tenant.account_id}:model-package/my-rl/2" in page
    assert "loss" in page and "20" in page and BASE in page


def test_filters_and_empty_states(alice, versions) -> None:
    services.package_update_approval(
        tenant=alice.tenant, actor="x", group_name="my-rl", version=1, status="Approved"
    )
    page = alice.get("/registry/groups/my-rl?approval_status=Approved").content.decode()
    assert "/versions/1" in page and '/versions/2"' not in page
    page = alice.get("/registry/groups/my-rl?approval_status=Rejected").content.decode()
    assert "No version matches" in page
    assert alice.get("/registry/groups/my-rl?kind=nonsense").status_code == 400
    services.group_create(tenant=alice.tenant, actor="x", name="empty-one")
    assert "No versions yet" in alice.get("/registry/groups/empty-one").content.decode()


def test_create_group_validates_in_place(alice) -> None:
    assert "No model package groups yet" in alice.get("/registry").content.decode()
    r = alice.post("/registry", {"name": "-bad-", "description": ""})
    assert r.status_code == 400
    assert "letters, digits and hyphens" in r.content.decode() and 'aria-invalid="true"' in (
        r.content.decode()
    )
    r = alice.post("/registry", {"name": "good-one", "description": "evals"})
    assert r.status_code == 302 and r["Location"] == "/registry/groups/good-one"
    r = alice.post("/registry", {"name": "good-one"})
    assert r.status_code == 400 and "exists" in r.content.decode()


def test_approve_and_reject(alice, versions) -> None:
    r = alice.post(
        "/registry/groups/my-rl/versions/2/approval",
        {"approval_status": "Approved", "approval_description": "beats v1"},
    )
    assert r.status_code == 302 and r["Location"] == "/registry/groups/my-rl/versions/2"
    v2 = ModelPackage.objects.get(pk=versions[1].pk)
    assert v2.approval_status == "Approved" and v2.approval_description == "beats v1"
    assert v2.approval_updated_by.endswith(":user/alice@example.com")
    assert AuditEvent.objects.filter(
        action="registry:UpdateModelPackageApproval", allowed=True, resource__endswith="my-rl/2"
    ).exists()
    r = alice.post(
        "/registry/groups/my-rl/versions/1/approval",
        {"approval_status": "Rejected", "back": "group"},
    )
    assert r.status_code == 302 and r["Location"] == "/registry/groups/my-rl"
    assert "Rejected" in alice.get(r["Location"]).content.decode()
    r = alice.post(
        "/registry/groups/my-rl/versions/1/approval",
        {"approval_status": "Approved", "approval_description": "x" * 1025},
    )
    assert r.status_code == 400 and "at most 1024 characters" in r.content.decode()
    r = alice.post("/registry/groups/my-rl/versions/1/approval", {"approval_status": "Maybe"})
    assert r.status_code == 400 and "Select a valid choice" in r.content.decode()


def test_download_streams_the_adapter(alice, versions) -> None:
    r = alice.get("/registry/groups/my-rl/versions/1/download?format=adapter")
    assert r.status_code == 200 and r["Content-Type"] == "application/gzip"
    assert r["Content-Disposition"] == "attachment; filename=my-rl-v1-adapter.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(b"".join(r.streaming_content))) as tar:
        names = sorted(tar.getnames())
        body = tar.extractfile("my-rl-v1-adapter/adapter_config.json").read()
    assert names == [
        "my-rl-v1-adapter",
        "my-rl-v1-adapter/adapter_config.json",
        "my-rl-v1-adapter/adapter_model.safetensors",
        "my-rl-v1-adapter/loopwright.json",
    ]
    assert body == b"adapter_config.json of step 1"
    r = alice.get("/registry/groups/my-rl/versions/1/download?format=merged")
    assert r.status_code == 400 and "no merged model" in r.content.decode()


def test_charlie_sees_nothing_of_acme(alice, charlie, versions) -> None:
    assert "my-rl" not in charlie.get("/registry").content.decode()
    for url in (
        "/registry/groups/my-rl",
        "/registry/groups/my-rl/versions/1",
        "/registry/groups/my-rl/versions/1/download",
    ):
        assert charlie.get(url).status_code == 404, url
    r = charlie.post("/registry/groups/my-rl/versions/1/approval", {"approval_status": "Approved"})
    assert r.status_code == 404
    assert ModelPackage.objects.get(pk=versions[0].pk).approval_status == "PendingManualApproval"


def test_a_billing_viewer_may_look_but_not_approve(alice, versions) -> None:
    viewer = member("vera", alice, Membership.Role.BILLING_VIEWER)
    assert viewer.get("/registry/groups/my-rl").status_code == 200
    r = viewer.post("/registry/groups/my-rl/versions/1/approval", {"approval_status": "Approved"})
    assert r.status_code == 403 and "registry:UpdateModelPackageApproval" in r.content.decode()
    assert viewer.get("/registry/groups/my-rl/versions/1/download").status_code == 403
    assert viewer.post("/registry", {"name": "mine"}).status_code == 403


def test_bob_the_member_may_approve(bob, versions) -> None:
    r = bob.post("/registry/groups/my-rl/versions/1/approval", {"approval_status": "Approved"})
    assert r.status_code == 302


def test_a_versions_step_is_its_runs_optimizer_step_and_its_values_read_well(
    alice, charlie, versions
) -> None:
    from controlplane.training_sessions.models import Operation

    model = TrainingModel.objects.get(pk=versions[0].model_id)
    for seq in range(1, 16):  # optimizer steps at 2, 4, …, 14: seven before v2 (saved at 20)
        kind = Operation.Kind.OPTIM_STEP if seq % 2 == 0 else Operation.Kind.FORWARD_BACKWARD
        Operation.objects.create(
            tenant=alice.tenant, session=model.session, model=model, seq_id=seq, kind=kind,
            payload={}, payload_digest=str(seq), status=Operation.Status.DONE,
        )  # fmt: skip
    ModelPackage.objects.filter(pk=versions[1].pk).update(metrics={"loss": 15.993757247924805})
    group = alice.get("/registry/groups/my-rl").context["versions"]
    assert {v["p"].version: v["step"] for v in group} == {1: 4, 2: 7}
    page = alice.get("/registry/groups/my-rl/versions/2").content.decode()
    assert "after optimizer step 7" in page and "(operation 20 of its run)" in page
    assert "15.99" in page and "15.993757" not in page
    assert "None" not in page.split("<main", 1)[1]
    assert "adapter-with-optimizer.tar.gz" in page
    assert charlie.get("/registry/groups/my-rl/versions/2").status_code == 404


def test_a_version_shows_words_not_stored_values_nor_the_servers_folders(
    alice, charlie, versions, settings
) -> None:
    v1, v2 = versions
    ModelPackage.objects.filter(pk=v1.pk).update(
        storage_uri=f"file://{settings.STORAGE_DIR}/{alice.tenant.pk}/{v1.model_id}/weights/step-1"
    )
    ModelPackage.objects.filter(pk=v2.pk).update(storage_uri="s3://acme-ckpt/loopwright/v2")
    page = alice.get(f"/registry/groups/my-rl/versions/{v1.version}")
    html = page.content.decode()
    main = html[html.index("<main") :]
    assert page.status_code == 200
    assert "The service’s own storage" in main
    assert str(settings.STORAGE_DIR) not in html and "file://" not in html
    assert ">Pending manual approval<" in main and ">PendingManualApproval<" not in main
    assert "Training state" in main
    s3 = alice.get(f"/registry/groups/my-rl/versions/{v2.version}").content.decode()
    assert "<code>s3://acme-ckpt/loopwright/v2</code>" in s3  # the owner's own bucket is shown
    listing = alice.get("/registry/groups/my-rl").content.decode()
    assert ">Pending manual approval</span>" in listing
    assert '<option value="PendingManualApproval" >Pending manual approval</option>' in listing
    assert charlie.get(f"/registry/groups/my-rl/versions/{v1.version}").status_code == 404
