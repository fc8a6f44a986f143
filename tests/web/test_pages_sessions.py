"""The session pages: list (live fragment), the new-session form (validated as the API does),
one session's page (timeline, curves, checkpoints, snippet) and Stop; charlie sees none of it."""

from __future__ import annotations

import pytest

from controlplane.tenants.models import Membership, StorageLocation, Subnet
from controlplane.tenants.services import membership_add, user_create
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from controlplane.training_sessions.services import sessions as services
from controlplane.training_sessions.services import submit
from web.session_reads import steps_of

from .conftest import BASE_MODEL, PASSWORD, finish, logged_in, operation, train_tokens

pytestmark = pytest.mark.django_db

FB, STEP = Operation.Kind.FORWARD_BACKWARD, Operation.Kind.OPTIM_STEP


def new_session(person, name: str = "run-1") -> tuple[Session, TrainingModel]:
    """A session with a ready model, made the way the API makes one."""
    session = services.session_create(
        tenant=person.tenant, name=name, platform={"role_arn": person.role_arn}
    )
    op = submit.model_create(
        tenant=person.tenant,
        session_id=session.id,
        model_seq_id=0,
        base_model=BASE_MODEL,
        lora={"rank": 8, "alpha": 16.0},
    )
    finish(op)
    session.refresh_from_db()
    return session, TrainingModel.objects.get(pk=op.model_id)


def form(person, **change) -> dict:
    return (
        {"name": "web run", "base_model": BASE_MODEL, "rank": "8", "alpha": "16"}
        | {"role_arn": person.role_arn}
        | change
    )


# -- the list --------------------------------------------------------------------------------
def test_list_shows_the_tenants_sessions_only(alice, charlie, worker):
    new_session(alice, "alice-run")
    new_session(charlie, "charlie-run")
    page = alice.get("/sessions")
    assert page.status_code == 200
    html = page.content.decode()
    assert "alice-run" in html and "charlie-run" not in html and BASE_MODEL in html
    assert 'data-refresh="/sessions"' in html  # a live session: the list refreshes itself


def test_list_fragment_is_the_table_alone(alice, worker):
    new_session(alice, "alice-run")
    fragment = alice.get("/sessions?state=active", headers={"X-Fragment": "1"})
    html = fragment.content.decode()
    assert "alice-run" in html and "<html" not in html and "<table" in html
    assert "X-Fragment" in fragment.headers["Vary"]
    assert "No stopped session" in alice.get("/sessions?state=stopped").content.decode()


def test_list_empty_says_how_to_start(alice):
    html = alice.get("/sessions").content.decode()
    assert "No session yet" in html and 'href="/sessions/new"' in html
    assert "data-refresh" not in html


# -- creating one ----------------------------------------------------------------------------
def test_new_session_form_offers_live_base_models_and_the_session_role(alice, worker):
    html = alice.get("/sessions/new").content.decode()
    assert f'<option value="{BASE_MODEL}"' in html
    assert f'value="{alice.role_arn}"' in html  # the role field starts with the session role
    assert '<label for="id_rank">' in html and '<label for="id_subnets">' in html


def test_creating_a_session_makes_its_model_like_the_api(alice, worker):
    page = alice.post("/sessions/new", form(alice))
    assert page.status_code == 302
    session = Session.objects.get(tenant=alice.tenant, name="web run")
    assert page.headers["Location"] == f"/sessions/{session.id}"
    assert session.platform["role_arn"] == alice.role_arn
    model = session.models.get()
    assert model.base_model == BASE_MODEL and model.model_seq_id == 0
    assert model.lora["rank"] == 8 and model.lora["alpha"] == 16.0
    assert model.operations.get().kind == Operation.Kind.CREATE_MODEL
    detail = alice.get(page.headers["Location"]).content.decode()
    assert "created; its model is starting" in detail


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"rank": "eight"}, "rank", "lora_config.rank: Input should be a valid integer"),
        ({"alpha": "lots"}, "alpha", "lora_config.alpha: Input should be a valid number"),
        ({"subnets": "subnet-xyz", "security_group_ids": "sg-0123456789"}, "subnets", "subnets[0]"),
        ({"subnets": "subnet-0123456789"}, "security_group_ids", "security_group_ids"),
        (
            {"subnets": "subnet-0123456789", "security_group_ids": "sg-0123456789"},
            "subnets",
            "is not registered to this account",
        ),
        ({"role_arn": ""}, "role_arn", "role_arn is required"),
        ({"model_package_group_arn": "not-an-arn"}, "model_package_group_arn", "expected"),
        ({"s3_output_path": "s3://elsewhere/x"}, "s3_output_path", "not inside a storage location"),
        ({"kms_key_arn": "alias/nope"}, "kms_key_arn", "not found"),
        ({"base_model": "nobody/serves-this"}, "base_model", "is not served here"),
    ],
)
def test_new_session_errors_are_shown_next_to_their_field(alice, worker, change, field, message):
    page = alice.post("/sessions/new", form(alice, **change))
    assert page.status_code >= 400
    html = page.content.decode()
    assert f'id="id_{field}_error"' in html, html[html.find("<form") :][:3000]
    assert message in html
    assert not Session.objects.filter(tenant=alice.tenant).exists()  # nothing half-made


def test_another_tenants_role_is_not_found_on_the_role_field(alice, charlie, worker):
    page = alice.post("/sessions/new", form(alice, role_arn=charlie.role_arn))
    assert page.status_code == 404 and 'id="id_role_arn_error"' in page.content.decode()
    assert not Session.objects.exists()


def test_vpc_and_storage_that_belong_to_the_account_are_accepted(alice, worker):
    Subnet.objects.create(tenant=alice.tenant, subnet_id="subnet-0123456789")
    StorageLocation.objects.create(tenant=alice.tenant, uri="s3://acme-bucket/runs")
    html = alice.get("/sessions/new").content.decode()
    assert "subnet-0123456789" in html and "s3://acme-bucket/runs" in html
    page = alice.post(
        "/sessions/new",
        form(
            alice,
            subnets="subnet-0123456789",
            security_group_ids="sg-0123456789, sg-abcdef0123",
            s3_output_path="s3://acme-bucket/runs/web",
        ),
    )
    assert page.status_code == 302
    session = Session.objects.get(tenant=alice.tenant)
    assert session.platform["vpc_config"] == {
        "subnets": ["subnet-0123456789"],
        "security_group_ids": ["sg-0123456789", "sg-abcdef0123"],
    }
    assert session.platform["s3_output_path"] == "s3://acme-bucket/runs/web"


def test_bob_the_member_may_create_and_stop_sessions(bob, worker):
    page = bob.post("/sessions/new", form(bob))
    assert page.status_code == 302
    session = Session.objects.get(tenant=bob.tenant)
    assert bob.post(f"/sessions/{session.id}/stop").status_code == 302
    session.refresh_from_db()
    assert session.state in Session.ENDED_STATES


def test_a_billing_viewer_reads_sessions_but_may_not_create_or_stop_them(alice, worker):
    session, _ = new_session(alice)
    user = user_create(email="vera@example.com", password=PASSWORD)
    vera = logged_in(
        membership_add(tenant=alice.tenant, user=user, role=Membership.Role.BILLING_VIEWER),
        role_arn=alice.role_arn,
        api_key="",
    )
    assert vera.get("/sessions").status_code == 200
    assert vera.get(f"/sessions/{session.id}").status_code == 200
    refused = vera.post("/sessions/new", form(vera, name="vera-run"))
    assert (
        refused.status_code == 403 and "sessions:CreateTrainingSession" in refused.content.decode()
    )
    assert not Session.objects.filter(name="vera-run").exists()
    stop = vera.post(f"/sessions/{session.id}/stop")
    assert stop.status_code == 403 and "sessions:StopTrainingSession" in stop.content.decode()
    session.refresh_from_db()
    assert session.state == Session.State.ACTIVE


# -- one session -----------------------------------------------------------------------------
def trained(alice) -> tuple[Session, TrainingModel]:
    """Two optimizer steps of two passes each, then one pass of the next step, and a failure."""
    session, model = new_session(alice)
    seq = 1
    for loss in (8.0, 6.0, 4.0, 2.0):
        finish(
            operation(model, FB, seq, train_tokens(4)),
            {"metrics": {"loss:sum": loss, "tokens:sum": 4.0, "reward:mean": loss / 10}},
        )
        seq += 1
        if seq in (3, 6):
            finish(operation(model, STEP, seq), {"metrics": {"grad_norm:mean": 1.0}})
            seq += 1
    finish(operation(model, FB, seq), error="data[0]: target_tokens is missing")
    return session, model


def test_session_page_shows_state_lora_timeline_curves_and_snippet(alice, worker):
    session, model = trained(alice)
    page = alice.get(f"/sessions/{session.id}")
    assert page.status_code == 200
    html = page.content.decode()
    assert session.id in html and model.id in html and BASE_MODEL in html
    assert "LoRA rank</dt><dd>8" in html and "LoRA alpha</dt><dd>16.0" in html
    assert 'class="badge active"' in html
    # the timeline: kinds, seq ids, tokens, duration, the error
    assert "forward backward" in html and "optim step" in html and "create model" in html
    assert "target_tokens is missing" in html and 'class="badge failed"' in html
    assert ">4</td>" in html  # a pass's tokens
    assert "16" in html  # the session's tokens in all
    # curves: loss per token and the reward-like metric, as inline SVG
    assert 'aria-label="Loss per token"' in html and 'aria-label="Rewards"' in html
    assert "reward:mean" in html
    # the SDK snippet, with this session's settings
    assert "from loopwright import ServiceClient" in html
    assert f"svc.create_training_client(&quot;{model.id}&quot;)" in html  # its live model
    assert f"role_arn=&quot;{alice.role_arn}&quot;" in html
    assert f'data-refresh="/sessions/{session.id}"' in html
    assert 'action="/sessions/' + session.id + '/stop"' in html


def test_session_page_fragment_is_its_live_part(alice, worker):
    session, _ = trained(alice)
    html = alice.get(f"/sessions/{session.id}", headers={"X-Fragment": "1"}).content.decode()
    assert "<html" not in html and "Operations" in html and "optim step" in html


def test_loss_per_step_sums_the_passes_of_each_step():
    ops = [
        (FB, 1, {"loss:sum": 8.0, "tokens:sum": 4.0, "reward:mean": 0.1}),
        (FB, 2, {"loss:sum": 4.0, "tokens:sum": 4.0, "reward:mean": 0.3}),
        (STEP, 3, {"grad_norm:mean": 1.0}),
        (FB, 4, {"loss:sum": 2.0, "tokens:sum": 4.0}),
        (STEP, 5, {}),
        (FB, 6, {"loss:sum": 1.0, "tokens:sum": 2.0}),
    ]
    loss, rewards, stepped = steps_of(ops)
    assert stepped and loss == [(1.0, 1.5), (2.0, 0.5), (3.0, 0.5)]
    assert rewards == {"reward:mean": [(1.0, pytest.approx(0.2))]}
    # a model that never stepped: each pass by its seq id
    loss, _, stepped = steps_of([(FB, 1, {"loss:sum": 3.0, "tokens:sum": 3.0}), (FB, 2, None)])
    assert not stepped and loss == [(1.0, 1.0)]


def test_checkpoints_link_to_their_registry_versions(alice, worker):
    from controlplane.training_sessions.models import Checkpoint

    session, model = new_session(alice)
    ckpt = Checkpoint.objects.create(
        tenant=alice.tenant,
        model=model,
        kind=Checkpoint.Kind.TRAINING,
        name="state-000001",
        tinker_path=f"tinker://{model.id}/weights/state-000001",
        storage_path="/tmp/x",
        lora=model.lora,
        base_model=BASE_MODEL,
        size_bytes=2048,
    )
    from controlplane.registry.models import ModelPackage, ModelPackageGroup

    group = ModelPackageGroup.objects.create(tenant=alice.tenant, name="runs", created_by="t")
    ModelPackage.objects.create(
        tenant=alice.tenant,
        group=group,
        version=1,
        kind="training",
        base_model=BASE_MODEL,
        tinker_path=ckpt.tinker_path,
        checkpoint=ckpt,
        created_by="t",
    )
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert ckpt.tinker_path in html and "runs v1" in html and "2.0\xa0KB" in html
    assert 'href="/registry/groups/runs/versions/1"' in html
    # once its model is gone, the snippet continues from the latest training checkpoint
    TrainingModel.objects.filter(session=session).update(state=TrainingModel.State.UNLOADED)
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert "create_training_client_from_state_with_optimizer" in html
    assert f"&quot;{ckpt.tinker_path}&quot;" in html


def test_charlie_never_sees_or_stops_alices_session(alice, charlie, worker):
    session, _ = new_session(alice)
    assert charlie.get(f"/sessions/{session.id}").status_code == 404
    assert charlie.get(f"/sessions/{session.id}", headers={"X-Fragment": "1"}).status_code == 404
    assert charlie.post(f"/sessions/{session.id}/stop").status_code == 404
    session.refresh_from_db()
    assert session.state == Session.State.ACTIVE
    assert session.id not in charlie.get("/sessions").content.decode()


def test_stop_ends_the_session_and_is_a_post(alice, worker):
    session, _ = new_session(alice)
    assert alice.get(f"/sessions/{session.id}/stop").status_code == 405
    page = alice.post(f"/sessions/{session.id}/stop")
    assert page.status_code == 302 and page.headers["Location"] == f"/sessions/{session.id}"
    session.refresh_from_db()
    assert session.state in (Session.State.STOPPING, Session.State.STOPPED)
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert f"Session {session.id} is {session.state}" in html
    assert "Stop session" not in html
    again = alice.post(f"/sessions/{session.id}/stop")  # stopping twice is fine
    assert again.status_code == 302


def test_unknown_session_is_not_found(alice):
    assert alice.get("/sessions/sess-nope").status_code == 404


def test_live_refreshes_are_audited_only_when_refused(alice, bob, worker):
    """A live page reloads itself every 5 s: its view is on record, the allowed refreshes are
    not (they would be two rows per reload); a refused refresh always is."""
    from controlplane.audit.models import AuditEvent
    from controlplane.iam.services import user_policy_put
    from controlplane.tenants.selectors import membership_get

    session, _ = trained(alice)
    rows = AuditEvent.objects.filter(tenant=alice.tenant, action="sessions:DescribeTrainingSession")
    before = rows.count()
    assert alice.get(f"/sessions/{session.id}").status_code == 200
    viewed = rows.count()
    assert viewed > before
    for _ in range(3):
        assert alice.get(f"/sessions/{session.id}", headers={"X-Fragment": "1"}).status_code == 200
    assert rows.count() == viewed
    deny = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Deny", "Action": "sessions:DescribeTrainingSession", "Resource": "*"}
        ],
    }
    user_policy_put(
        membership=membership_get(tenant=alice.tenant, username="bob@example.com"),
        name="no-sessions",
        document=deny,
    )
    refused = bob.get(f"/sessions/{session.id}", headers={"X-Fragment": "1"})
    assert refused.status_code == 403
    assert rows.filter(allowed=False, principal__endswith="bob@example.com").count() == 1
