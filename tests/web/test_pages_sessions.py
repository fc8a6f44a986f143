"""The session pages: list (live fragment), the new-session form (validated as the API does),
one session's page (timeline, curves, checkpoints, snippet) and Stop; charlie sees none of it."""

from __future__ import annotations

import re

import pytest

from controlplane.operations import training
from controlplane.tenants.models import Membership, StorageLocation, Subnet
from controlplane.tenants.services import membership_add, user_create
from controlplane.training_sessions.models import Operation, Session, TrainingModel
from controlplane.training_sessions.services import sessions as services
from tests.fleet import registration
from tests.people import PASSWORD
from tests.support.pages import BASE_MODEL, finish, logged_in, operation, train_tokens
from web.session_reads import steps_of

pytestmark = pytest.mark.django_db

FB, STEP = Operation.Kind.FORWARD_BACKWARD, Operation.Kind.OPTIM_STEP


def new_session(person, name: str = "run-1") -> tuple[Session, TrainingModel]:
    """A session with a ready model, made the way the API makes one."""
    session = services.session_create(
        tenant=person.tenant, name=name, platform={"role_arn": person.role_arn}
    )
    op = training.model_create(
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
        ({"rank": "eight"}, "rank", "a whole number"),
        ({"rank": "0"}, "rank", "must be between 1 and 128, got 0"),
        ({"rank": "100000"}, "rank", "must be between 1 and 128, got 100000"),
        ({"alpha": "lots"}, "alpha", "a number, e.g. 16"),
        ({"alpha": "-5"}, "alpha", "must be greater than 0, got -5"),
        ({"alpha": "0"}, "alpha", "must be greater than 0"),
        (
            {"subnets": "subnet-xyz", "security_group_ids": "sg-0123456789"},
            "subnets",
            "&#x27;subnet-xyz&#x27; is not a subnet id",
        ),
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
        ({"replicas": "two"}, "replicas", "must be a whole number, 1 or more"),
        ({"replicas": "1.5"}, "replicas", "must be a whole number, 1 or more"),
        ({"replicas": "0"}, "replicas", "must be a whole number, 1 or more; got 0"),
        ({"replicas": "-1"}, "replicas", "must be a whole number, 1 or more; got -1"),
        ({"replicas": "9"}, "replicas", "8 replicas per training model"),
        ({"replicas": "2"}, "replicas", f"1 live worker serves {BASE_MODEL}"),
    ],
)
def test_new_session_errors_are_shown_next_to_their_field(alice, worker, change, field, message):
    page = alice.post("/sessions/new", form(alice, **change))
    assert page.status_code >= 400
    html = page.content.decode()
    assert f'id="id_{field}_error"' in html, html[html.find("<form") :][:3000]
    assert message in html
    error = html[html.find(f'id="id_{field}_error"') :][:400]
    assert "lora_config" not in error and "vpc_config" not in error  # the label names the field
    assert not Session.objects.filter(tenant=alice.tenant).exists()  # nothing half-made


def test_the_form_asks_for_replicas_and_the_model_keeps_them(alice, charlie, worker):
    html = alice.get("/sessions/new").content.decode()
    assert '<label for="id_replicas">Replicas</label>' in html
    assert 'name="replicas" value="1"' in html and 'min="1"' in html
    serve_also("gpu1")  # a second worker of the base model
    page = alice.post("/sessions/new", form(alice, replicas="2"))
    assert page.status_code == 302, page.content.decode()[:2000]
    model = Session.objects.get(tenant=alice.tenant, name="web run").models.get()
    assert model.replicas == 2
    assert model.operations.get().plan["replicas"] == 2
    empty = alice.post("/sessions/new", form(alice, name="one", replicas=""))
    assert empty.status_code == 302  # empty means 1
    assert Session.objects.get(tenant=alice.tenant, name="one").models.get().replicas == 1
    assert charlie.get(page.headers["Location"]).status_code == 404


def serve_also(name: str):
    from controlplane.fleet.services import worker_register

    return worker_register(**registration(name, BASE_MODEL)).worker


@pytest.mark.parametrize(
    ("lora", "field"),
    [
        ({"rank": 0}, "lora_config.rank"),
        ({"rank": 100000}, "lora_config.rank"),
        ({"rank": 8, "alpha": -5}, "lora_config.alpha"),
        ({"rank": 8, "seed": -1}, "lora_config.seed"),
        (
            {"rank": 8, "train_attn": False, "train_mlp": False, "train_unembed": False},
            "lora_config",
        ),
    ],
)
def test_the_api_refuses_the_same_adapters_before_making_a_model(
    alice, charlie, worker, lora, field
):
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_X_API_KEY=alice.api_key)
    made = api.post(
        "/api/v1/create_session",
        {"tags": [], "sdk_version": "t", "role_arn": alice.role_arn},
        format="json",
    )
    sid = made.json()["session_id"]
    body = {"session_id": sid, "model_seq_id": 0, "base_model": BASE_MODEL, "lora_config": lora}
    refused = api.post("/api/v1/create_model", body, format="json")
    assert refused.status_code == 400 and refused.json()["field"] == field, refused.content
    assert not TrainingModel.objects.filter(session_id=sid).exists()
    theirs = APIClient()
    theirs.credentials(HTTP_X_API_KEY=charlie.api_key)
    good = body | {"lora_config": {"rank": 8}}
    assert theirs.post("/api/v1/create_model", good, format="json").status_code == 404


def test_a_session_whose_model_failed_is_failed_with_the_reason_and_frees_its_slot(
    alice, charlie, worker, settings
):
    settings.MAX_CONCURRENT_SESSIONS = 1
    page = alice.post("/sessions/new", form(alice))
    session = Session.objects.get(tenant=alice.tenant)
    assert page.headers["Location"] == f"/sessions/{session.id}"
    create = Operation.objects.get(session=session, kind=Operation.Kind.CREATE_MODEL)
    finish(create, error="CUDA out of memory while making the adapter")
    session.refresh_from_db()
    assert session.state == Session.State.FAILED and session.ended_at is not None
    assert TrainingModel.objects.get(session=session).state == TrainingModel.State.FAILED
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert "Its model could not be created" in html and "CUDA out of memory" in html
    listing = alice.get("/sessions").content.decode()
    assert "failed" in listing and "CUDA out of memory" in listing
    overview = alice.get("/overview").content.decode()
    assert "CUDA out of memory" in overview
    # the API says the same: sessions/<id> names why it failed
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_X_API_KEY=alice.api_key)
    described = api.get(f"/api/v1/sessions/{session.id}").json()
    assert described["state"] == "failed"
    assert "CUDA out of memory" in described["failure"]
    theirs = APIClient()
    theirs.credentials(HTTP_X_API_KEY=charlie.api_key)
    assert theirs.get(f"/api/v1/sessions/{session.id}").status_code == 404
    # its quota slot is free again: another session can start
    again = alice.post("/sessions/new", form(alice, name="second"))
    assert again.status_code == 302, again.content.decode()[:2000]
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


def test_a_failed_model_does_not_fail_a_session_that_already_runs(alice, charlie, worker):
    session, _ = new_session(alice)
    op = training.model_create(
        tenant=alice.tenant,
        session_id=session.id,
        model_seq_id=1,
        base_model=BASE_MODEL,
        lora={"rank": 4},
    )
    finish(op, error="out of memory")
    session.refresh_from_db()
    assert session.state == Session.State.ACTIVE
    assert "could not be created" not in alice.get(f"/sessions/{session.id}").content.decode()
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


def test_another_tenants_role_is_not_found_on_the_role_field(alice, charlie, worker):
    # input to fix, not a missing page: the form again, 400, the reason under the field
    page = alice.post("/sessions/new", form(alice, role_arn=charlie.role_arn))
    assert page.status_code == 400 and 'id="id_role_arn_error"' in page.content.decode()
    assert "no role" in page.content.decode()
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
    assert "LoRA rank</dt><dd>8" in html and "LoRA alpha</dt><dd>16</dd>" in html
    assert "seed</dt><dd>None" not in html and "None" not in html.split("<main", 1)[1]
    assert 'class="badge active"' in html
    # the timeline: kinds, seq ids, tokens, duration, the error
    assert "forward + backward" in html and "optimizer step" in html and "create model" in html
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
    for part in ("summary", "curves", "ops"):
        assert f'data-refresh="/sessions/{session.id}?part={part}"' in html
    assert 'action="/sessions/' + session.id + '/stop"' in html
    assert 'data-confirm="Stop the session' in html  # it asks first


def test_session_page_parts_are_its_live_regions(alice, charlie, worker):
    session, _ = trained(alice)

    def part(name: str, **query) -> str:
        r = alice.get(
            f"/sessions/{session.id}", {"part": name, **query}, headers={"X-Fragment": "1"}
        )
        assert r.status_code == 200 and "<html" not in r.content.decode()
        return r.content.decode()

    assert "Model" in part("summary") and "Checkpoints" in part("summary")
    assert 'aria-label="Loss per token"' in part("curves")
    assert "optimizer step" in part("ops") and "target_tokens is missing" in part("ops")
    assert "Checkpoints" not in part("ops")
    r = charlie.get(f"/sessions/{session.id}", {"part": "ops"}, headers={"X-Fragment": "1"})
    assert r.status_code == 404


def test_operations_are_paged_and_filtered_by_kind_and_status(alice, charlie, worker):
    session, model = new_session(alice)
    for seq in range(1, 61):
        op = operation(model, FB if seq % 2 else STEP, seq, train_tokens(3) if seq % 2 else {})
        if seq <= 50:
            finish(op, {"metrics": {"loss:sum": 3.0, "tokens:sum": 3.0}} if seq % 2 else {})
    first = alice.get(f"/sessions/{session.id}")
    rows = first.context["ops"]
    assert len(rows) == 25 and rows[0].seq_id == 60  # newest first
    assert first.context["ops_page"].paginator.count == 61
    assert "Page 1 of 3" in first.content.decode()
    third = alice.get(f"/sessions/{session.id}", {"page": "3"}).context["ops"]
    assert [r.seq_id for r in third] == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    steps = alice.get(f"/sessions/{session.id}", {"kind": STEP}).context
    assert {r.kind for r in steps["ops"]} == {STEP} and steps["ops_page"].paginator.count == 30
    # the step column counts optimizer steps: seq 2 is step 1, seq 3 (a pass after it) step 2
    by_seq = {r.seq_id: r for r in third}
    assert by_seq[2].step == 1 and by_seq[3].step == 2 and by_seq[0].step is None
    pending = alice.get(f"/sessions/{session.id}", {"status": "pending"}).context["ops"]
    assert len(pending) == 10 and {r.status for r in pending} == {"pending"}
    both = alice.get(f"/sessions/{session.id}", {"status": "pending", "kind": FB, "page": "1"})
    assert {(r.kind, r.status) for r in both.context["ops"]} == {(FB, "pending")}
    html = both.content.decode()
    assert '<option value="forward_backward" selected>' in html
    assert "kind=forward_backward&amp;status=pending" in html or "status=pending&amp;kind" in html
    odd = alice.get(f"/sessions/{session.id}", {"kind": "nonsense", "page": "x"})
    assert odd.status_code == 200 and odd.context["ops_page"].number == 1
    assert charlie.get(f"/sessions/{session.id}", {"page": "2"}).status_code == 404


def test_curves_smooth_log_scale_hover_values_and_compare_runs_of_a_group(alice, charlie, worker):
    group = f"arn:loopwright:registry::{alice.tenant.account_id}:model-package-group/sweep"
    runs = []
    for name in ("lr-1e-4", "lr-1e-3"):
        session, model = new_session(alice, name)
        Session.objects.filter(pk=session.pk).update(platform={"model_package_group_arn": group})
        for step in range(1, 6):
            finish(
                operation(model, FB, 2 * step - 1),
                {"metrics": {"loss:sum": 10.0 / step, "tokens:sum": 2.0}},
            )
            finish(operation(model, STEP, 2 * step), {})
        runs.append(session)
    other, _ = new_session(alice, "elsewhere")
    mine = runs[1]
    html = alice.get(f"/sessions/{mine.id}").content.decode()
    # hover values: a band per step, naming the value there
    assert 'class="hover"' in html and "optimizer step 3 · loss per token: 1.667" in html
    assert "Compare with other runs of sweep" in html and "lr-1e-4" in html
    assert "elsewhere" not in html.split("Compare with", 1)[1].split("</fieldset>", 1)[0]
    smooth = alice.get(f"/sessions/{mine.id}", {"smooth": "0.6"}).content.decode()
    assert "(smoothed " in smooth and 'opacity="0.3"' in smooth
    assert '<option value="0.6" selected>' in smooth
    log = alice.get(f"/sessions/{mine.id}", {"scale": "log"}).content.decode()
    assert '<option value="log" selected>' in log
    both = alice.get(f"/sessions/{mine.id}", {"compare": runs[0].id}).content.decode()
    loss_chart = both.split('aria-label="Loss per token"', 1)[1].split("</figure>", 1)[0]
    assert loss_chart.count("<polyline") == 2 and "lr-1e-4 · loss per token" in loss_chart
    # a run that is not of the group, or charlie's, is never drawn
    assert (
        alice.get(f"/sessions/{mine.id}", {"compare": other.id})
        .content.decode()
        .count("elsewhere · loss")
        == 0
    )
    assert charlie.get(f"/sessions/{mine.id}", {"compare": runs[0].id}).status_code == 404


def test_failovers_are_told_in_plain_words(alice, charlie, worker):
    from datetime import UTC, datetime, timedelta

    from controlplane.training_sessions.models import Recovery

    session, model = new_session(alice)
    for seq in range(1, 9):
        finish(operation(model, FB if seq % 2 else STEP, seq), {})
    at = datetime(2026, 3, 2, 14, 3, 12, tzinfo=UTC)
    Recovery.objects.create(
        tenant=alice.tenant, session=session, model=model, cause=Recovery.Cause.WORKER_LOST,
        from_worker="gpu0", to_worker="gpu1", declared_at=at, declared_by="gpu1", requeued=2,
        recovery_seq=6, recovery_kind="snapshot", replayed=3,
        restored_at=at + timedelta(seconds=4.2), outcome=Recovery.Outcome.RESTORED,
    )  # fmt: skip
    Recovery.objects.create(
        tenant=alice.tenant, session=session, model=model, cause=Recovery.Cause.WORKER_STOPPED,
        from_worker="gpu1", declared_at=at + timedelta(minutes=5), declared_by="gpu1",
        outcome=Recovery.Outcome.FAILED, error="no worker serves acme/base",
    )  # fmt: skip
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert "Failovers" in html
    assert (
        "Worker gpu0 was lost (silent past its lease) at 14:03:12 UTC on 2026-03-02, noticed by gpu1."
        in html
    )
    assert "2 queued operations moved with it." in html
    assert (
        "The model resumed on gpu1 from its snapshot after step 3 (operation 6), replayed 3 "
        "operations completed since, back 4.2 s after the loss was noticed." in html
    )
    assert "Worker gpu1 stopped and handed its models over" in html
    assert "It could not be restored: no worker serves acme/base." in html
    assert html.index("stopped and handed") < html.index("was lost")  # newest first
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


def test_a_member_without_stop_sees_the_button_disabled_with_the_reason(alice, charlie, worker):
    from controlplane.iam.services import user_policy_put
    from controlplane.tenants.selectors import membership_get

    session, _ = new_session(alice)
    user = user_create(email="vic@example.com", password=PASSWORD)
    membership = membership_add(tenant=alice.tenant, user=user, role=Membership.Role.MEMBER)
    deny = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Action": "sessions:StopTrainingSession", "Resource": "*"}]}  # fmt: skip
    user_policy_put(
        membership=membership_get(tenant=alice.tenant, username="vic@example.com"),
        name="no-stop",
        document=deny,
    )
    vic = logged_in(membership, role_arn=alice.role_arn, api_key="")
    html = vic.get(f"/sessions/{session.id}").content.decode()
    assert "You may not stop it (sessions:StopTrainingSession)" in html
    assert 'action="/sessions/' + session.id + '/stop"' not in html
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


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


def test_session_page_shows_replicas_and_the_group_they_run_on(alice, charlie, worker):
    from controlplane.fleet.models import ReplicaGroup

    session, _ = new_session(alice, "wide")
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert "Replicas</dt><dd>1</dd>" in html and "Worker group" not in html
    serve_also("gpu1")
    op = training.model_create(
        tenant=alice.tenant,
        session_id=session.id,
        model_seq_id=1,
        base_model=BASE_MODEL,
        lora={"rank": 8},
        replicas=2,
    )
    model = TrainingModel.objects.select_related("worker__group").get(pk=op.model_id)
    group = model.worker.group  # placement formed it: gpu0, which has a model, leads
    ReplicaGroup.objects.filter(pk=group.pk).update(state=ReplicaGroup.State.READY)
    part = alice.get(f"/sessions/{session.id}?part=summary", headers={"X-Fragment": "1"})
    html = part.content.decode()
    assert "Replicas</dt><dd>2</dd>" in html and "Worker group</dt>" in html
    assert 'class="badge ready"' in html and "gpu0 (rank 0), gpu1 (rank 1)" in html
    assert html.count("Worker group") == 1  # the single-replica model shows none
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


def test_session_page_shows_a_base_sharded_over_its_group(alice, charlie, db):
    """Workers that cannot hold the base whole: the model runs on a sharded group of them."""
    from controlplane.fleet.models import ReplicaGroup
    from controlplane.fleet.services import worker_register

    for name in ("sh0", "sh1"):
        worker_register(**registration(name, BASE_MODEL, memory_bytes=2**35, shard_ranks=2))
    session, model = new_session(alice, "big")
    assert model.worker.name == "sh0"
    ReplicaGroup.objects.update(state=ReplicaGroup.State.READY)
    part = alice.get(f"/sessions/{session.id}?part=summary", headers={"X-Fragment": "1"})
    html = part.content.decode()
    assert "Replicas</dt><dd>1</dd>" in html and "Worker group</dt>" in html
    shown = " ".join(html.split())
    assert "ready</span> base sharded over 2 workers: sh0 (rank 0), sh1 (rank 1)" in shown
    assert charlie.get(f"/sessions/{session.id}").status_code == 404


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


def test_the_form_prices_a_run_before_anything_is_spent(alice, worker):
    from datetime import UTC, datetime
    from decimal import Decimal

    from controlplane.metering.services import price_set

    price_set(base_model="*", meter="train_tokens", per_million=Decimal("0.30"),
              effective_from=datetime(2025, 1, 1, tzinfo=UTC))  # fmt: skip
    html = alice.get("/sessions/new").content.decode()
    assert "What it costs." in html and "training tokens $0.30" in html
    # 1,000 steps × 8 sequences × 512 tokens = 4,096,000 training tokens at $0.30 per million
    assert "4,096,000" in html and "$1.2288" in html
    assert 'id="estimate-prices"' in html and '"train_tokens": "0.300000"' in html


def test_the_rank_limit_is_the_engines():
    from controlplane.training_sessions.services.lora import MAX_LORA_RANK
    from workers.engine.host import HostConfig

    assert HostConfig().max_lora_rank == MAX_LORA_RANK


def test_curves_smoothing_and_log_ticks():
    from web.charts import Series, ema, line_chart

    assert ema([1.0, 1.0, 1.0], 0.9) == pytest.approx([1.0, 1.0, 1.0])  # debiased from the start
    assert ema([0.0, 10.0], 0.5) == pytest.approx([0.0, 20 / 3])
    assert ema([3.0, 1.0], 0.0) == [3.0, 1.0]
    points = [(float(x), 8.0 / x) for x in range(1, 21)]
    svg = line_chart("Loss per token", [Series("loss", points)], log_y=True)
    ticks = re.findall(r'class="tick"[^>]*text-anchor="end">([^<]+)<', svg)
    assert ticks == ["0.2", "0.5", "1", "2", "5", "10"]
    with_zero = line_chart(
        "Loss", [Series("loss", [(1.0, 0.0), (2.0, 1.0), (3.0, 0.5)])], log_y=True
    )
    assert with_zero.count("<circle") == 2  # a log scale leaves out what is not above zero
    nothing = line_chart("Loss", [Series("loss", [(1.0, 0.0)])], log_y=True)
    assert "above zero" in nothing


def test_session_page_shows_a_waiting_model_and_sampler_in_the_placement_queue(
    alice, charlie, worker
):
    from controlplane.fleet.models import Worker
    from controlplane.operations import sampling

    Worker.objects.update(capacity=1)
    new_session(alice, "holder")  # takes the only slot
    Subnet.objects.create(tenant=alice.tenant, subnet_id="subnet-0a1b2c3d")
    session = services.session_create(
        tenant=alice.tenant,
        name="queued",
        platform={
            "role_arn": alice.role_arn,
            "vpc_config": {"subnets": ["subnet-0a1b2c3d"], "security_group_ids": ["sg-0a1b2c3d"]},
        },
    )
    sampler = sampling.sampler_create(
        tenant=alice.tenant,
        session_id=session.id,
        seq=0,
        base_model=BASE_MODEL,
        model_path=None,
        model_id=None,
        queue=True,
    )
    open_session = services.session_create(
        tenant=alice.tenant, name="waits", platform={"role_arn": alice.role_arn}
    )
    training.model_create(
        tenant=alice.tenant,
        session_id=open_session.id,
        model_seq_id=0,
        base_model=BASE_MODEL,
        lora={"rank": 8},
    )
    html = " ".join(alice.get(f"/sessions/{open_session.id}").content.decode().split())
    assert "Waiting for a worker: waiting for a free slot on an open-network worker" in html
    assert (
        "Place in line</dt><dd><strong>1</strong> of 1 waiting for a free slot of "
        f"<code>{BASE_MODEL}</code></dd>"
    ) in html
    assert "Network</dt><dd>open network</dd>" in html
    assert f'no estimate<span class="hint"> · no estimate yet: no model of {BASE_MODEL}' in html
    html = " ".join(alice.get(f"/sessions/{session.id}").content.decode().split())
    assert f"Sampler <code>{sampler.id}</code>" in html
    assert "waiting for a worker on its network" in html
    assert "Network</dt><dd>subnet-0a1b2c3d with sg-0a1b2c3d</dd>" in html
    assert charlie.get(f"/sessions/{session.id}").status_code == 404
    assert charlie.get(f"/sessions/{open_session.id}").status_code == 404
    # the list says which sessions wait, and their place
    listing = " ".join(alice.get("/sessions").content.decode().split())
    assert listing.count("queued: 1 of 1 waiting for a worker") == 1
    assert "queued:" not in charlie.get("/sessions").content.decode()


def test_the_first_step_shows_that_the_model_is_loading(alice, charlie, worker):
    from controlplane.fleet.services import Fence
    from controlplane.operations import claim, complete

    session = services.session_create(
        tenant=alice.tenant, name="loading", platform={"role_arn": alice.role_arn}
    )
    create = training.model_create(
        tenant=alice.tenant, session_id=session.id, model_seq_id=0, base_model=BASE_MODEL,
        lora={"rank": 8},
    )  # fmt: skip
    model = TrainingModel.objects.get(pk=create.model_id)
    operation(model, FB, 1, train_tokens(16))
    html = alice.get(f"/sessions/{session.id}").content.decode()
    assert "Loading the model</strong> on worker gpu0, about to start" in html
    assert '<a href="#model-loading">the model is loading</a>' in html
    create.refresh_from_db()
    fence = Fence(create.worker.pk, create.worker.generation)
    assert claim.claim(create, fence)
    live = alice.get(f"/sessions/{session.id}?part=summary", HTTP_X_FRAGMENT="1").content.decode()
    assert '1 pending · 1 running · <a href="#model-loading">the model is loading</a>' in live
    assert re.search(r"Loading the model</strong> on worker gpu0, for \d+", live)
    assert charlie.get(f"/sessions/{session.id}").status_code == 404
    complete.complete(create, {}, fence)
    done = alice.get(f"/sessions/{session.id}").content.decode()
    assert "Loading the model" not in done and "the model is loading" not in done


def test_a_session_page_shows_its_sagemaker_name_and_its_recorded_sequences(alice, charlie, worker):
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from controlplane.sagemaker_sessions.services import training_session_create
    from controlplane.training_sessions.models import RecordedSample

    with transaction.atomic():
        made = training_session_create(
            tenant=alice.tenant, actor=alice.role_arn, name="nightly-rl", base_model=BASE_MODEL,
            lora={"rank": 8}, platform={"role_arn": alice.role_arn}, tags=None,
            base_model_arn="arn:aws:sagemaker:::hub-content/x", output_path="s3://acme/out",
        )  # fmt: skip
    html = alice.get(f"/sessions/{made.id}").content.decode()
    assert "through the SageMaker API" in html and "<code>nightly-rl</code>" in html
    assert "<code>s3://acme/out</code>" in html
    assert "Recorded sequences</dt><dd>none kept" in html
    until = timezone.now() + timedelta(days=1)
    RecordedSample.objects.create(
        id="op-1", tenant=alice.tenant, session=made, prompt=b"\0" * 8, tokens=b"\0" * 4000,
        logprobs=b"\0" * 4000, lengths=[500, 500], size_bytes=8008, expiries=[0, 0],
        expires_at=until,
    )  # fmt: skip
    html = alice.get(f"/sessions/{made.id}").content.decode()
    assert "1 sample request kept for training requests to cite (7.8\xa0KB" in html
    plain, _ = new_session(alice, "tinker-run")
    other = alice.get(f"/sessions/{plain.id}").content.decode()
    assert "SageMaker" not in other
    listing = alice.get("/sessions").content.decode()
    assert listing.count('title="made through the SageMaker API">SageMaker</span>') == 1
    assert charlie.get(f"/sessions/{made.id}").status_code == 404


def test_the_session_list_shows_what_each_run_cost(alice, charlie, worker):
    from datetime import UTC, datetime

    from controlplane.metering.models import Meter

    from .test_pages_billing import prices, usage

    prices()
    paid, _ = new_session(alice, "paid-run")
    new_session(alice, "free-run")
    usage(alice.tenant, paid.id, BASE_MODEL, Meter.TRAIN_TOKENS, 2_000_000, datetime.now(UTC))
    html = alice.get("/sessions").content.decode()
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r'>(paid-run|free-run)</a>.*?<td class="num">(\$[\d.,]+)</td>', html, re.S)}  # fmt: skip
    assert rows == {"paid-run": "$0.60", "free-run": "$0.00"}, rows
    assert "paid-run" not in charlie.get("/sessions").content.decode()


def test_the_lora_description_names_the_projector_only_when_adapted() -> None:
    from web.session_page import lora_view
    from web.snippets import _lora_args

    shown = dict(lora_view({"rank": 8, "train_projector": True}))
    assert "adapts the vision projector" in shown
    assert "adapts the vision projector" not in dict(lora_view({"rank": 8}))
    assert _lora_args({"rank": 8, "train_projector": True}) == "rank=8, train_projector=True"
    assert _lora_args({"rank": 8}) == "rank=8"
